"""Speed of the dog classifier on one core: how many times faster than real time.

    .venv/bin/python benchmarks/bench_classifier.py [--minutes 30] [--model FILE.npz]

Frames come from the bundled demo recording (measured by the sensor code once, through the
wire format), repeated to the requested length. Reports, per second of audio, the classifier
alone (inputs + network + smoothing) and the whole per-device pipeline (classifier + event
tracker), as real-time factors (audio seconds per CPU second). BLAS is limited to one thread.
"""

from __future__ import annotations

# isort: off
from single_thread import ROOT  # first: one BLAS thread before numpy loads
# isort: on
import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from analyzer.detect.detector import make_scorer, model_version  # noqa: E402
from analyzer.detect.pipeline import DevicePipeline  # noqa: E402
from analyzer.detect.settings import DetectorSettings  # noqa: E402
from analyzer.offline.analysis import frames_of_file  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="audio to score")
    parser.add_argument("--model", default="", help="model file (default: the bundled one)")
    args = parser.parse_args()
    _, frames = frames_of_file(ROOT / "demo" / "example.flac", 100.0)
    n = round(args.minutes * 60)
    stream = [frames[i % len(frames)] for i in range(n)]
    settings = DetectorSettings(model_path=args.model)
    scorer = make_scorer(settings, stream[0].hop_s)
    started = time.process_time()
    for frame in stream:
        scorer.scores(frame.mel_db)
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
    print(f"classifier alone: {classifier_s / n * 1e3:.3f} ms CPU per second of audio, "
          f"{n / classifier_s:,.0f}x real time per core")  # fmt: skip
    print(f"pipeline (classifier + events): {pipeline_s / n * 1e3:.3f} ms per second, "
          f"{n / pipeline_s:,.0f}x real time per core; {events} events")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
