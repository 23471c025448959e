"""Journal saves while devices hold frames for a missing predecessor (issue 32, item 4).

    .venv/bin/python benchmarks/bench_journal_held.py [--devices 40] [--held 119] [--rounds 5]

Each device holds ``--held`` frames (16 kHz, frame 1 missing); each round saves every device's
state, as the analyzer does after a stored batch that touched them all. "whole buffer" is the
previous format (FORMAT 1: the reorder buffer pickled with its waiting frames at every save);
"held rows" is the current one (the frames are rows written once, the first round). Prints
milliseconds per round and the file size; the machine is shared, so read the spread.
"""

from __future__ import annotations

import argparse
import pickle
import tempfile
import time
from pathlib import Path

import numpy as np

from analyzer.ingest.journal import DeviceJournal, HeldChanges, device_state_blob
from analyzer.ingest.ordering import ReorderBuffer
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
        for name in ("whole buffer", "held rows"):
            path = Path(folder) / f"{name.replace(' ', '-')}.sqlite"
            journal = DeviceJournal(path)
            times_ms = []
            for round_ in range(args.rounds):
                started = time.perf_counter()
                if name == "whole buffer":
                    states = {d: pickle.dumps({"reorder": r, "implausible": 0,
                                               "fed_end_ns": None, "detection": None},
                                              protocol=pickle.HIGHEST_PROTOCOL)
                              for d, r in buffers.items()}
                    journal.save(states, [])
                else:
                    added = [(d, f) for d, r in buffers.items() for f in r.held().values()]
                    journal.save({d: device_state_blob(r, 0, None, None)
                                  for d, r in buffers.items()}, [],
                                 HeldChanges(added=added if round_ == 0 else []))
                times_ms.append(round((time.perf_counter() - started) * 1000))
            journal.close()
            print(f"{name}: {args.devices} devices x {buffers['dev-0'].waiting} held frames, "
                  f"ms per save round {times_ms}, file {path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
