"""Speed of YAMNet's front end and network on one core: real-time factor (CPU s per audio s).

    .venv/bin/python benchmarks/bench_yamnet.py [--minutes 10] [--block-s 0.1]

The demo recording (16 kHz) is repeated to the requested length and fed to the streaming
front end (sensor/yamnet_features.py) in capture-sized blocks; every patch it completes goes
through the network (analyzer/detect/yamnet.py, onnxruntime on one thread) at once, one
patch at a time, as on the sensor. BLAS and onnxruntime are limited to one thread.
"""

from __future__ import annotations

# isort: off
from single_thread import ROOT  # first: one BLAS thread before numpy loads
# isort: on
import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402

from analyzer.detect.yamnet import YamnetNetwork  # noqa: E402
from sensor.yamnet_features import SAMPLE_RATE_HZ, YamnetFrontEnd  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="audio to process")
    parser.add_argument("--block-s", type=float, default=0.1, help="capture block length, s")
    args = parser.parse_args()
    if not args.minutes > 0 or not args.block_s > 0:
        parser.error("--minutes and --block-s must be positive")
    demo, rate = sf.read(ROOT / "demo" / "example.flac", dtype="float64")
    if rate != SAMPLE_RATE_HZ:
        parser.error(f"the demo recording is {rate} Hz, expected {SAMPLE_RATE_HZ}")
    n = round(args.minutes * 60 * SAMPLE_RATE_HZ)
    audio = np.resize(demo, n)
    block = round(args.block_s * SAMPLE_RATE_HZ)
    network = YamnetNetwork(threads=1)
    network.run(np.zeros((1, 96, 64), np.float32))  # session warm-up, as at the sensor's start
    front_end = YamnetFrontEnd()
    front_cpu = network_cpu = 0.0
    patches = 0
    dog_max = 0.0
    wall = time.perf_counter()
    for start in range(0, n, block):
        t0 = time.process_time()
        ready = front_end.process(audio[start : start + block])
        t1 = time.process_time()
        for patch in ready:
            dog_max = max(dog_max, float(network.dog_scores(network.run(patch[None]))[0]))
        front_cpu += t1 - t0
        network_cpu += time.process_time() - t1
        patches += len(ready)
    wall = time.perf_counter() - wall
    audio_s = n / SAMPLE_RATE_HZ
    total = front_cpu + network_cpu
    print(f"{audio_s:.0f} s of 16 kHz audio (demo repeated), blocks of {block} samples, "
          f"{patches} patches; highest dog score {dog_max:.3f}")  # fmt: skip
    print(f"front end: {front_cpu:.2f} s CPU, real-time factor {front_cpu / audio_s:.5f}")
    print(f"network:   {network_cpu:.2f} s CPU, real-time factor {network_cpu / audio_s:.5f} "
          f"({network_cpu / patches * 1e3:.2f} ms per patch)")  # fmt: skip
    print(f"together:  {total:.2f} s CPU, real-time factor {total / audio_s:.5f} "
          f"({audio_s / total:,.0f}x real time per core); wall {wall:.2f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
