"""Sensor feature extraction: real-time factor and peak memory on a one-hour recording.

    .venv/bin/python benchmarks/bench_sensor.py [--rate 48000] [--minutes 60]

Builds the test file by tiling the bundled demo recording (resampled with soxr to the chosen
rate), then measures it exactly as ``barkwatch-sensor run --input`` would, without MQTT:
FileSource -> FrameBuilder -> wire encoding. Reports the real-time factor (processing time
divided by audio time, one run) and the peak resident memory of the process. Then, over the
same file, the meter's per-frame work alone (issue 25's budget, 0.003 at 48 kHz): DC
removal, A/C weighting with F/S time weighting and levels, one-third-octave bands and the
LAF percentiles, each stage timed, one second of audio at a time; with ``--repeats N`` the
meter's pass over the file runs N times and the fastest pass is reported (on a shared machine
the other passes measure the neighbours' load as much as the code).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile
import soxr

from sensor.capture import FileSource
from sensor.frames import FrameBuilder
from sensor.wire import encode_frame

DEMO = Path(__file__).resolve().parent.parent / "demo" / "example.flac"


def build_file(path: Path, rate: int, minutes: float) -> None:
    audio, demo_rate = soundfile.read(DEMO, dtype="float32")
    if rate != demo_rate:
        audio = soxr.resample(audio, demo_rate, rate)
    total = round(minutes * 60 * rate)
    with soundfile.SoundFile(path, "w", rate, 1, subtype="PCM_16") as out:
        written = 0
        while written < total:
            chunk = audio[: total - written]
            out.write(chunk)
            written += chunk.size


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}


def meter_stages(
    path: Path, repeats: int = 1, clock: Callable[[], float] = time.perf_counter
) -> tuple[float, dict[str, float]]:
    """Seconds of audio and seconds spent per stage of the meter's per-frame work, in the
    fastest of ``repeats`` passes over the file, timed by ``clock``."""
    passes = [_meter_pass(path, clock) for _ in range(repeats)]
    audio_s = passes[0][0]
    return audio_s, min((spent for _, spent in passes), key=lambda spent: sum(spent.values()))


def _meter_pass(path: Path, clock: Callable[[], float]) -> tuple[float, dict[str, float]]:
    info = soundfile.info(path)
    rate = info.samplerate
    builder = FrameBuilder("bench", rate, 120.0, start_ns=1)
    spent = dict.fromkeys(("dc removal", "weightings + time weightings + levels",
                           "third-octave bands", "percentiles"), 0.0)
    names = list(spent)
    for second in soundfile.blocks(path, blocksize=rate, dtype="float64"):
        if second.size < rate:
            break
        t0 = clock()
        clean = builder.dc_blocker.process(second)
        t1 = clock()
        _, steps = builder.meter.process_steps(clean, builder.hop)
        t2 = clock()
        builder.bank.process(clean)
        t3 = clock()
        builder.percentiles.add(steps.laf_db)
        builder.percentiles.exceedance_db()
        t4 = clock()
        for name, start, end in zip(names, (t0, t1, t2, t3), (t1, t2, t3, t4), strict=True):
            spent[name] += end - start
    return info.frames / rate, spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=48000)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=1,
                        help="passes of the meter alone over the file; the fastest is reported")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="time the meter's stages by the wall clock or the thread's CPU time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hour.wav"
        print(f"building {args.minutes:g} min at {args.rate} Hz ...", flush=True)
        build_file(path, args.rate, args.minutes)
        rss_before_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        source = FileSource(path, block_s=0.1)  # capture-sized blocks, as from a microphone
        builder = FrameBuilder("bench", source.sample_rate, 120.0, start_ns=1)
        frames = payload_bytes = 0
        started = time.perf_counter()
        for block in source:
            assert block.samples is not None
            for frame in builder.push(block.samples):
                payload_bytes += len(encode_frame(frame))
                frames += 1
        elapsed = time.perf_counter() - started
        meter_audio_s, spent = meter_stages(path, max(1, args.repeats), CLOCKS[args.clock])
    audio_s = args.minutes * 60
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rate {args.rate} Hz: {frames} frames of {audio_s:.0f} s audio in {elapsed:.1f} s; "
          f"real-time factor {elapsed / audio_s:.4f} ({audio_s / elapsed:.0f}x faster than "
          f"real time); peak RSS {peak_mb:.0f} MB (before measuring {rss_before_mb:.0f} MB); "
          f"mean payload {payload_bytes / max(frames, 1):.0f} bytes/frame")
    total = sum(spent.values())
    passes = f"fastest of {args.repeats} passes" if args.repeats > 1 else "one pass"
    passes += f", {args.clock} clock"
    print(f"meter's per-frame work alone ({passes}): real-time factor "
          f"{total / meter_audio_s:.4f} ({meter_audio_s / total:.0f}x faster than real time)")
    for name, seconds in spent.items():
        print(f"  {name}: {seconds / meter_audio_s:.5f} ({100 * seconds / total:.0f} %)")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
