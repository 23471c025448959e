"""Speed of the dog classifier on one core: how many times faster than real time.

    .venv/bin/python benchmarks/bench_classifier.py [--minutes 30] [--model FILE.npz]

Frames come from the bundled demo recording (measured by the sensor code once, through the
wire format), repeated to the requested length with continuous capture times. Reports, per
second of audio, the CNN alone (inputs + network, as the sensor runs it since wire v2) and the
analyzer's per-device pipeline (smoothing, the dog head on YAMNet's patches, fusion, event
tracker), as real-time factors (audio seconds per CPU second). BLAS is limited to one thread.
"""

from __future__ import annotations

# isort: off
from single_thread import ROOT  # first: one BLAS thread before numpy loads
# isort: on
import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import soundfile  # noqa: E402

from analyzer.detect.classifier import DogClassifier, cached_model  # noqa: E402
from analyzer.detect.detector import model_version  # noqa: E402
from analyzer.detect.pipeline import DevicePipeline  # noqa: E402
from analyzer.detect.settings import DetectorSettings  # noqa: E402
from analyzer.offline.analysis import frames_of_file  # noqa: E402
from sensor.frames import mel_rows_from_samples  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="audio to score")
    parser.add_argument("--model", default="", help="model file (default: the bundled one)")
    args = parser.parse_args()
    demo = ROOT / "demo" / "example.flac"
    _, frames = frames_of_file(demo, 100.0)
    audio, rate = soundfile.read(demo, dtype="float64", always_2d=True)
    mel = mel_rows_from_samples(audio.mean(axis=1), rate, 100.0)
    n = round(args.minutes * 60)
    # The demo's frames over and over, their capture times made continuous (no gaps)
    stream = [frames[i % len(frames)].retimed(i * 10**9) for i in range(n)]
    settings = DetectorSettings(model_path=args.model)
    scorer = DogClassifier(cached_model(args.model), 1)  # as the sensor runs it
    started = time.process_time()
    for i in range(n):
        first = (i % (len(mel) // 50)) * 50
        scorer.scores(np.asarray(mel[first : first + 50], np.float32))
    scorer.flush()
    classifier_s = time.process_time() - started
    pipeline = DevicePipeline("bench", settings)
    started = time.process_time()
    events = 0
    for frame in stream:
        events += len(pipeline.feed(frame).events)
    events += len(pipeline.flush())
    pipeline_s = time.process_time() - started
    print(f"model {model_version(settings)}; {n} s of audio (demo recording repeated)")
    print(f"CNN alone (on the sensor since wire v2): {classifier_s / n * 1e3:.3f} ms CPU per "
          "second of audio, "
          f"{n / classifier_s:,.0f}x real time per core")  # fmt: skip
    print(f"analyzer pipeline (smoothing, dog head on the patches, fusion, events): "
          f"{pipeline_s / n * 1e3:.3f} ms per second, "
          f"{n / pipeline_s:,.0f}x real time per core; {events} events")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
