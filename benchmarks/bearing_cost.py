"""What the bearing costs the sensor (issue 36, goal: at most 0.005 real-time factor more on one
core): the work an array adds to the frame builder's thread, through the sensor's own code
(:class:`sensor.bearing.BearingStage`).

Real barks (the demo recording's 70-90 s, resampled to 48 kHz with soxr) arrive as a plane wave
on the board, every input channel the board delivers (8); they are handed on in 0.1 s capture
blocks as the microphone delivers them, each kept in the ring, and every second is then
treated as a dog second (the worst case: a dog heard all the time) and given its bearing. CPU
time of this process (``time.process_time``), BLAS/OpenMP one thread, best of ``--repeats``;
CPU seconds per second of audio are the real-time factor on one core. The ring alone (every
second, dog or not) is given beside.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bearing_cost.py --seconds 60

A benchmark, not a test.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import soundfile  # noqa: E402
import soxr  # noqa: E402

from sensor.array import PRESETS, ArraySettings  # noqa: E402
from sensor.bearing import BearingStage  # noqa: E402
from sensor.frames import frames_from_samples  # noqa: E402
from sensor.wire import GATE_DOG  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RATE = 48_000
INPUT_CHANNELS = 8  # what the 6-mic board and the UMA-8 deliver; the 4-mic board gives 4
C = 343.0


def array_audio(array: ArraySettings, seconds: int) -> np.ndarray:
    """The demo's barks as a plane wave from 300 degrees on ``array``, (samples, 8) float32."""
    audio, rate = soundfile.read(ROOT / "demo" / "example.flac", dtype="float64")
    clip = soxr.resample(audio[70 * rate:90 * rate], rate, RATE)
    clip = np.tile(clip, math.ceil(seconds * RATE / clip.size))[: seconds * RATE]
    azimuth = math.radians(array.array_azimuth(300.0))
    advance = array.positions_m() @ np.array([math.cos(azimuth), math.sin(azimuth), 0.0]) / C
    spectrum = np.fft.rfft(clip)
    freqs = np.fft.rfftfreq(clip.size, 1.0 / RATE)
    out = np.zeros((clip.size, INPUT_CHANNELS), np.float32)
    for channel, t in zip(array.channels, advance, strict=True):
        out[:, channel] = np.fft.irfft(spectrum * np.exp(2j * np.pi * freqs * t), clip.size)
    return out


def run_once(array: ArraySettings, audio: np.ndarray, dog: bool) -> tuple[float, int]:
    """CPU seconds to keep every block and (``dog``) give each second its bearing; and the
    seconds that got one."""
    template = dataclasses.replace(next(frames_from_samples(np.zeros(RATE), RATE, 120.0)),
                                   gate=GATE_DOG)
    stage = BearingStage(array, RATE)
    block = RATE // 10
    seconds = audio.shape[0] // RATE
    frames = [dataclasses.replace(template, capture_ns=k * 10**9) for k in range(seconds)]
    started = time.process_time()
    for k in range(seconds):
        for start in range(k * RATE, (k + 1) * RATE, block):
            stage.push(audio[start:start + block], block)
        if dog and k >= 2:  # the frame of second k - 2 comes out now (sensor/bearing.py)
            stage.annotate([frames[k - 2]], 0)
    if dog:
        stage.annotate(frames[max(seconds - 2, 0):], 0)
    return time.process_time() - started, stage.counters.with_bearing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60, help="seconds of audio (60)")
    parser.add_argument("--repeats", type=int, default=3, help="best of (3)")
    parser.add_argument("--out", help="write the figures as JSON here too")
    args = parser.parse_args(argv)
    if args.seconds < 3 or args.repeats < 1:
        parser.error("--seconds must be at least 3 and --repeats at least 1")
    results: dict[str, object] = {"command": " ".join(sys.argv), "seconds": args.seconds,
                                  "repeats": args.repeats, "rate_hz": RATE,
                                  "load_average_before": os.getloadavg()[0], "boards": {}}
    for board in PRESETS:
        array = ArraySettings(preset=board, orientation_deg=40.0)
        audio = array_audio(array, args.seconds)
        ring = min(run_once(array, audio, False)[0] for _ in range(args.repeats))
        runs = [run_once(array, audio, True) for _ in range(args.repeats)]
        best = min(cpu for cpu, _ in runs)
        figures = {"ring_rtf": round(ring / args.seconds, 5),
                   "ring_and_bearing_every_second_rtf": round(best / args.seconds, 5),
                   "seconds_with_a_bearing": runs[0][1], "capsules": array.capsule_count}
        results["boards"][board] = figures  # type: ignore[index]
        print(f"{board}: ring alone {figures['ring_rtf']:.5f}, ring + bearing of every second "
              f"{figures['ring_and_bearing_every_second_rtf']:.5f} CPU s per audio s "
              f"({runs[0][1]} of {args.seconds} seconds with a bearing)")
    results["load_average_after"] = os.getloadavg()[0]
    print(f"load average {results['load_average_before']:.1f} -> "
          f"{results['load_average_after']:.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
