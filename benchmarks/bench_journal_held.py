"""Journal saves while devices hold frames for a missing predecessor (issue 32, item 4).

    .venv/bin/python benchmarks/bench_journal_held.py [--devices 40] [--held 119] [--rounds 5]

Each device holds ``--held`` frames (16 kHz, frame 1 missing); each round saves every device's
state, as the analyzer does after a stored batch that touched them all. Format 1 pickled the
reorder buffer with its waiting frames at every save (40 x 119: about 30 s a round); since
format 2 a held frame is written once, when it begins to wait (format 3, issue 37: in the
record of that save), so the first round writes the frames and the later ones only counts.
Prints milliseconds per round and the file size; the machine is shared, so read the spread.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from analyzer.ingest.journal import DeviceJournal
from analyzer.ingest.ordering import ReorderBuffer
from analyzer.ingest.saved import LiveDevice
from sensor.frames import frames_from_samples


def sine(frequency_hz: float, rms: float, duration_s: float, rate: int) -> np.ndarray:
    t = np.arange(round(duration_s * rate)) / rate
    return rms * np.sqrt(2.0) * np.sin(2.0 * np.pi * frequency_hz * t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=40)
    parser.add_argument("--held", type=int, default=119)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    frames = list(frames_from_samples(sine(500.0, 0.1, args.held + 2.0, 16000), 16000, 100.0,
                                      device_id="d", start_ns=1_780_351_200_000_000_000))
    buffers = {}
    for index in range(args.devices):
        reorder = ReorderBuffer(args.held + 1, 3600.0)
        reorder.push(frames[0])
        for frame in frames[2:args.held + 2]:
            reorder.push(frame)
        buffers[f"dev-{index}"] = reorder
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "journal"
        journal = DeviceJournal(path)
        times_ms = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            journal.save({d: LiveDevice(r, 0, None, None) for d, r in buffers.items()}, [])
            times_ms.append(round((time.perf_counter() - started) * 1000))
        journal.close()
        print(f"{args.devices} devices x {buffers['dev-0'].waiting} held frames, ms per save "
              f"round {times_ms}, file {path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
