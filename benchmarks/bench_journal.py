"""The analyzer journal's cost per frame against the frame's own analysis (issue 37, item 2).

    .venv/bin/python benchmarks/bench_journal.py [--minutes 12] [--steady-from-s 600]
        [--checkpoint-frames 60] [--wire] [--devices 1]

One device with an installation record (so the audibility assessor keeps its recent spectra
and its 10-minute background) takes the bundled demo recording, repeated to ``--minutes``, one
frame at a time as the live analyzer's worker does: ``DeviceAnalysis.feed`` (the frame's own
analysis: detector, events, audibility, rules, points), then the journal's save of that
device with the frame's key (what ``Analyzer._flush`` does after each stored batch; in a fleet
each batch touches each device about once). Since format 5 the save holds the frame's wire
payload (encoded before the clock starts: the sensor's work) and, every
``--checkpoint-frames`` frames, a checkpoint of the state. The frames are fed as the sensor
made them (with their embeddings, so the dog head runs here too: the figures stay comparable
with the earlier formats'); ``--wire``: decoded from their payloads, as the live analyzer
gets them. Prints, over the frames from
``--steady-from-s`` on (the background window full, as in a running analyzer), the mean,
median and p95 time per frame of each, by the thread's CPU clock (what a loaded machine
changes least) and by the wall clock, the bytes the journal wrote per frame and, since format
3, how long a replay and a rewrite of the file take; since format 5, how long a restart takes
to feed the frames since the last checkpoint again (the device's first use after it). The same
command runs on the tree before issue 37 (format 2: the state pickled into SQLite), for the
comparison. The machine is shared: read the load average printed beside it.

``--devices N`` (N > 1): N such devices take the recording side by side, and after each second
one save holds all N, as ``Keeper.save`` writes one record for the devices of a stored batch
(a fleet's batch holds many devices, each about once): the record's framing, CRC and
``write()`` are shared by N frames. The figures are then per frame (each round's times
divided by N: the medians are of those per-round means); the restart and replay figures are
left out (they are the one-device run's).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile

from analyzer.acoustics import InstallationRecord
from analyzer.config import AnalyzerConfig
from analyzer.ingest import journal as journal_module
from analyzer.ingest.device import DeviceAnalysis
from analyzer.ingest.journal import DeviceJournal
from analyzer.ingest.ordering import ReorderBuffer
from analyzer.ordinance import EvidenceChain
from sensor.frames import frames_from_samples
from sensor.wire import Frame, decode_frame, encode_frame

try:
    from analyzer.ingest.saved import LiveDevice as live_device
except ImportError:  # the tree before issue 37 (format 2)
    live_device = None  # type: ignore[assignment,misc]

FRAMES_JOURNALLED = live_device is not None and "fed" in live_device.__dataclass_fields__
ROOT = Path(__file__).resolve().parents[1]
START_NS = 1_780_351_200_000_000_000
DEVICE = "bench-journal"


def written_bytes() -> int:
    """Bytes this process has handed to write() so far (Linux ``/proc/self/io``, ``wchar``):
    during a save, what the journal wrote (SQLite's write-ahead log and pages, or records)."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("wchar:"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=12.0)
    parser.add_argument("--steady-from-s", type=float, default=600.0)
    parser.add_argument("--checkpoint-frames", type=int,
                        default=getattr(journal_module, "CHECKPOINT_FRAMES", 1),
                        help="format 5: the state every this many frames (default: the "
                        "analyzer's)")
    parser.add_argument("--wire", action="store_true",
                        help="feed the frames decoded from their payloads (as the analyzer)")
    parser.add_argument("--devices", type=int, default=1, metavar="N",
                        help="N devices side by side, one save of all N a second (as a "
                        "fleet's stored batch); figures per frame (default %(default)s)")
    args = parser.parse_args()
    if args.devices < 1:
        parser.error(f"--devices must be 1 or more, not {args.devices}")
    if args.devices > 1 and not FRAMES_JOURNALLED:
        parser.error("--devices N needs journal format 5 (the frames journalled)")
    audio, rate = soundfile.read(ROOT / "demo" / "example.flac", dtype="float64")
    repeats = int(np.ceil(args.minutes * 60 * rate / audio.shape[0]))
    audio = np.tile(audio, repeats)[: round(args.minutes * 60 * rate)]
    frames = list(frames_from_samples(audio, rate, 100.0, device_id=DEVICE, start_ns=START_NS))
    payloads = [encode_frame(f) for f in frames]
    if args.wire:
        frames = [decode_frame(p) for p in payloads]
    names = [DEVICE] if args.devices == 1 else [f"{DEVICE}-{k}" for k in range(args.devices)]
    devices = {name: (sited_analysis(name), ReorderBuffer(120, 30.0)) for name in names}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "journal"
        journal = (DeviceJournal(path, args.checkpoint_frames) if FRAMES_JOURNALLED
                   else DeviceJournal(path))
        feed_s, save_s, written = fed_and_saved(journal, frames, payloads, devices)
        journal.close()
        size = path.stat().st_size
        if args.devices > 1:
            print(f"{args.devices} devices, one save of all of them a second; per frame:")
            figures(args, frames, feed_s, save_s, written, size)
        else:
            analysis, reorder = devices[DEVICE]
            report(args, frames, feed_s, save_s, written, size, path, reorder, analysis)


def fed_and_saved(journal: DeviceJournal, frames: list[Frame], payloads: list[bytes],
                  devices: dict[str, tuple[DeviceAnalysis, ReorderBuffer]]
                  ) -> tuple[tuple[list[float], list[float]], tuple[list[float], list[float]],
                             list[int]]:  # fmt: skip
    """Each frame fed to every device, then one save of them all (``--devices N``: the
    keeper's record of a stored batch); the analysis's and the save's (wall, CPU) seconds
    and the bytes written, per frame (a round's over the number of devices)."""
    share = len(devices)
    feed_s: tuple[list[float], list[float]] = ([], [])
    save_s: tuple[list[float], list[float]] = ([], [])
    written: list[int] = []
    for frame, payload in zip(frames, payloads, strict=True):
        for _, reorder in devices.values():
            reorder.push(frame)
        started, started_cpu = time.perf_counter(), time.thread_time()
        for analysis, _ in devices.values():
            analysis.feed(frame)
        feed_s[0].append((time.perf_counter() - started) / share)
        feed_s[1].append((time.thread_time() - started_cpu) / share)
        before = written_bytes()
        started, started_cpu = time.perf_counter(), time.thread_time()
        save(journal, devices, frame, payload)
        save_s[0].append((time.perf_counter() - started) / share)
        save_s[1].append((time.thread_time() - started_cpu) / share)
        written.append((written_bytes() - before) // share)
    return feed_s, save_s, written


def sited_analysis(device: str = DEVICE) -> DeviceAnalysis:
    """The benchmark's device: an installation record, so the assessor keeps its stores."""
    site = InstallationRecord(device_id=device, source_to_sensor_m=8.0,
                              source_to_boundary_m=12.0)
    return DeviceAnalysis(device, AnalyzerConfig(), site, EvidenceChain())


def report(args: argparse.Namespace, frames: list[Frame],
           feed_s: tuple[list[float], list[float]], save_s: tuple[list[float], list[float]],
           written: list[int], size: int, path: Path, reorder: ReorderBuffer,
           analysis: DeviceAnalysis) -> None:
    """Print the figures (see the module docstring); then time a replay and a rewrite."""
    figures(args, frames, feed_s, save_s, written, size)
    if live_device is None:
        return
    started = time.perf_counter()
    journal = DeviceJournal(path)
    (resumed,), _ = journal.load()
    replay_s = time.perf_counter() - started
    if FRAMES_JOURNALLED:
        fresh = sited_analysis()
        started, started_cpu = time.perf_counter(), time.thread_time()
        assert resumed.restore_into(fresh), resumed.refusal
        print(f"restart: the device's checkpoint restored and the {resumed.replayed} frame(s) "
              f"journalled after it fed again (its first use) in "
              f"{(time.perf_counter() - started) * 1e3:.1f} ms "
              f"({(time.thread_time() - started_cpu) * 1e3:.1f} ms CPU); at most "
              f"{args.checkpoint_frames - 1} with --checkpoint-frames {args.checkpoint_frames}")
    started = time.perf_counter()
    rewritten = journal.compact(
        {DEVICE: live_device(reorder, 0, frames[-1].end_ns, analysis)})
    print(f"replaying the file {replay_s * 1e3:.1f} ms; rewriting it as one full record "
          f"(compaction, at {journal_module.COMPACT_RATIO:.0f}x growth) "
          f"{rewritten / 1024:.0f} KiB in "
          f"{(time.perf_counter() - started) * 1e3:.1f} ms")
    journal.close()
    started = time.perf_counter()
    DeviceJournal(path).load()
    print(f"replaying the rewritten file {(time.perf_counter() - started) * 1e3:.1f} ms")


def figures(args: argparse.Namespace, frames: list[Frame],
            feed_s: tuple[list[float], list[float]], save_s: tuple[list[float], list[float]],
            written: list[int], size: int) -> None:
    """Print the analysis's and the save's time per frame and the bytes written."""
    steady = slice(int(args.steady_from_s), None)
    print(f"{len(frames)} frames, {len(frames[steady])} from {args.steady_from_s:.0f} s on; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    feed = {clock: np.array(t[steady]) * 1e3 for clock, t in zip(("wall", "CPU"), feed_s,
                                                                   strict=True)}
    saved = {clock: np.array(t[steady]) * 1e3 for clock, t in zip(("wall", "CPU"), save_s,
                                                                   strict=True)}
    for clock in ("CPU", "wall"):
        f, s = feed[clock], saved[clock]
        print(f"{clock:4s} ms per frame, mean / median / p95: analysis (DeviceAnalysis.feed) "
              f"{f.mean():.3f} / {np.median(f):.3f} / {np.percentile(f, 95):.3f}; journal "
              f"save {s.mean():.3f} / {np.median(s):.3f} / {np.percentile(s, 95):.3f} "
              f"({100 * s.mean() / f.mean():.0f} % of the analysis by the means, "
              f"{100 * np.median(s) / np.median(f):.0f} % by the medians)")
    grown = np.array(written[steady])
    print(f"journal bytes written per frame (write() calls): mean {grown.mean() / 1024:.2f} "
          f"KiB, p95 {np.percentile(grown, 95) / 1024:.2f} KiB; the file at the end "
          f"{size / 1024:.0f} KiB for {len(frames)} saves")


def save(journal: DeviceJournal, devices: dict[str, tuple[DeviceAnalysis, ReorderBuffer]],
         frame: Frame, payload: bytes) -> None:
    """The journal's save of the devices after their frame was stored: format 5, the frame's
    payload (the state every ``--checkpoint-frames``), one record for them all; formats 3 and
    4, one record of what changed, appended; format 2 (the tree before issue 37, for the
    comparison), the device's state pickled whole into one SQLite transaction (one device)."""
    keys = [(name, frame.seq, frame.capture_ns) for name in devices]
    if FRAMES_JOURNALLED:
        journal.save({name: live_device(reorder, 0, frame.end_ns, analysis, fed=[payload])
                      for name, (analysis, reorder) in devices.items()}, keys)  # fmt: skip
    elif live_device is not None:
        journal.save({name: live_device(reorder, 0, frame.end_ns, analysis)
                      for name, (analysis, reorder) in devices.items()}, keys)  # fmt: skip
    else:
        (analysis, reorder), = devices.values()
        blob = journal_module.device_state_blob(reorder, 0, frame.end_ns, analysis)
        journal.save({DEVICE: blob}, keys)


if __name__ == "__main__":
    main()
