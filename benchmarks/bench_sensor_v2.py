"""The sensor's whole per-second work under wire v2, both networks included, on one core.

    .venv/bin/python benchmarks/bench_sensor_v2.py [--rate 48000] [--minutes 5] [--pi-factor 6]

Takes the bundled demo recording (resampled with soxr to the chosen rate, tiled to length) and
runs it one second at a time through what a sensor does with each second (issue 24 item 4):
the meter (DC removal, weightings, levels, third-octave bands, percentiles), the mel rows and
the small CNN's dog score (sensor.dog_cnn), the streaming resampler to 16 kHz, YAMNet's log-mel
front end and its network in onnxruntime (one thread), and the wire-v2 encoding. Reports the
real-time factor of the whole (CPU time of the process / audio time: on a shared machine wall
time measures the neighbours' load as much as the code) and of each stage, then the same
scaled by ``--pi-factor``: the assumed slowdown of one Raspberry Pi 4 core (Cortex-A72,
1.5 GHz) against one core of this machine. That factor is an assumption, not a measurement
(no Pi here): public single-core figures put a Pi 4 at about a quarter to a sixth of a
current x86-64 server core; 6 is the pessimistic end.
"""

from __future__ import annotations

# isort: off
from single_thread import ROOT  # first: one BLAS thread before numpy loads
# isort: on
import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import soundfile  # noqa: E402
import soxr  # noqa: E402

from sensor.frames import FrameBuilder  # noqa: E402
from sensor.wire import encode_frame  # noqa: E402

DEMO = ROOT / "demo" / "example.flac"
STAGES = ("meter (DC, weightings, levels, bands, percentiles)", "mel rows",
          "CNN (inputs + network)", "resample to 16 kHz", "YAMNet front end",
          "YAMNet network (onnxruntime)", "wire v2 encoding")


def audio_at(rate: int, minutes: float) -> np.ndarray:
    audio, demo_rate = soundfile.read(DEMO, dtype="float64", always_2d=True)
    mono = audio.mean(axis=1)
    if rate != demo_rate:
        mono = soxr.resample(mono, demo_rate, rate)
    total = round(minutes * 60 * rate)
    return np.resize(mono, total)


class Timed:
    """Wraps a bound method and adds its run time to ``spent[stage]``."""

    def __init__(self, spent: dict[str, float], stage: str, method: object) -> None:
        self.spent, self.stage, self.method = spent, stage, method

    def __call__(self, *args: object, **kwargs: object) -> object:
        start = time.process_time()
        try:
            return self.method(*args, **kwargs)  # type: ignore[operator]
        finally:
            self.spent[self.stage] += time.process_time() - start


def run(rate: int, minutes: float) -> tuple[float, float, dict[str, float], int]:
    audio = audio_at(rate, minutes)
    builder = FrameBuilder("bench", rate, 120.0, start_ns=1)
    spent = dict.fromkeys(STAGES, 0.0)
    networks = builder.networks
    # Stage timers around the calls the builder makes (the meter is the rest of _measure).
    for owner, name, stage in ((builder.mel, "process", 1), (networks.cnn, "scores", 2),
                               (networks.resampler, "process", 3),
                               (networks.front_end, "process", 4), (networks.yamnet, "run", 5)):
        setattr(owner, name, Timed(spent, STAGES[stage], getattr(owner, name)))
    builder.push(audio[:rate])  # warm-up second: numba, librosa and onnxruntime first calls
    for key in spent:
        spent[key] = 0.0
    frames = 0
    start = time.process_time()
    for first in range(rate, audio.size, rate):
        for frame in builder.push(audio[first : first + rate]):
            t0 = time.process_time()
            encode_frame(frame)
            spent[STAGES[6]] += time.process_time() - t0
            frames += 1
    total = time.process_time() - start
    audio_s = (audio.size - rate) / rate
    spent[STAGES[0]] = total - sum(spent[s] for s in STAGES[1:])
    return audio_s, total, spent, frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=48000, choices=(16000, 32000, 44100, 48000))
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--pi-factor", type=float, default=6.0,
                        help="assumed slowdown of a Raspberry Pi 4 core against this one")
    args = parser.parse_args()
    audio_s, total, spent, frames = run(args.rate, args.minutes)
    rtf = total / audio_s
    print(f"{audio_s:.0f} s of audio at {args.rate} Hz, {frames} frames: whole per-second work "
          f"{total / audio_s * 1e3:.2f} ms per second, real-time factor {rtf:.4f} "
          f"({1 / rtf:.0f}x real time)")
    for stage in STAGES:
        share = 100 * spent[stage] / total
        print(f"  {stage:52s} RTF {spent[stage] / audio_s:.4f} ({share:4.1f} %)")
    pi = rtf * args.pi_factor
    print(f"assumed Raspberry Pi 4 (x{args.pi_factor:g} per core): real-time factor {pi:.3f}, "
          f"{100 * pi:.0f} % of one of its 4 cores")


if __name__ == "__main__":
    main()
