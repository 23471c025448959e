#!/usr/bin/env python3
"""Fault injection, the long version (issue 23 item 1; docs/FAULTS.md).

Replays 30 minutes of audio with violations of the continuous rule in it (demo scenes made from
the bundled recording) through real Mosquitto (persistence on), InfluxDB, ``barkwatch analyzer
run`` and ``barkwatch-sensor run``, SIGKILLs them at seeded random moments (by default the
analyzer 10 times, InfluxDB 3, the broker 3, the sensor 5), then publishes the frames the sensor
sent into a fresh broker, InfluxDB and analyzer with nothing killed, and compares: every frame
stored once, scores, events and evidence windows equal, every window verifies, the outbox
passes SQLite's integrity check. Prints the schedule and every difference; exits 1 if there
are any, 2 if the run could not finish.

    .venv/bin/python scripts/fault_inject.py                 # the issue's counts, 30 minutes
    .venv/bin/python scripts/fault_inject.py --minutes 5 --kills analyzer=2,sensor=1
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the harness lives with the tests

from tests.faults.harness import (  # noqa: E402
    KINDS,
    FaultRun,
    FaultRunError,
    differences,
    fault_schedule,
)
from tests.faults.scene import write_violation_audio  # noqa: E402

log = logging.getLogger("fault_inject")

ISSUE_KILLS = "analyzer=10,influxdb=3,broker=3,sensor=5"
# Each scene: background, then barks for 8 minutes (over the 7-minute limit, Glencoe 701
# subd. 5), then background long enough for the live analyzer to seal the finding (continuity
# gap 60 s + the rules' reorder window 120 s).
SCENE_LEAD_S, SCENE_BARKING_S, SCENE_TAIL_S = 100.0, 480.0, 320.0
SCENE_S = 900.0  # about one scene's length


def kill_counts(text: str) -> dict[str, int]:
    """``analyzer=10,sensor=5`` -> {"analyzer": 10, "sensor": 5}; ValueError naming the part."""
    counts: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        kind, _, number = part.partition("=")
        if kind not in KINDS or not number.isdigit():
            raise ValueError(f"--kills: {part!r} is not KIND=COUNT with KIND one of "
                             f"{', '.join(KINDS)}")
        counts[kind] = int(number)
    return counts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="audio to replay, minutes (default 30; whole scenes of ~15)")
    parser.add_argument("--kills", default=ISSUE_KILLS,
                        help=f"SIGKILLs by kind (default {ISSUE_KILLS})")
    parser.add_argument("--seed", type=int, default=23, help="schedule seed (default 23)")
    parser.add_argument("--pace", type=float, default=3.0,
                        help="sensor replay speed-up (default 3; slower leaves more room "
                        "between faults)")
    parser.add_argument("--workdir", type=Path,
                        help="keep state and logs here (default: a temporary directory)")
    parser.add_argument("--json", type=Path, help="also write the summary as JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("analyzer").setLevel(logging.WARNING)
    try:
        counts = kill_counts(args.kills)
    except ValueError as exc:
        print(f"fault_inject: error: {exc}", file=sys.stderr)
        return 2
    if not 0 < args.minutes <= 240 or not 0 < args.pace <= 100:
        print("fault_inject: error: --minutes must be in (0, 240] and --pace in (0, 100]",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="barkwatch-faults-") as scratch:
        work = args.workdir or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        audio = work / "scene.wav"
        scenes = max(1, round(args.minutes * 60 / SCENE_S))
        total_s = int(write_violation_audio(audio, scenes, SCENE_BARKING_S, SCENE_LEAD_S,
                                            SCENE_TAIL_S))
        try:
            faults = fault_schedule(counts, total_s, args.seed)
        except ValueError as exc:
            print(f"fault_inject: error: {exc}", file=sys.stderr)
            return 2
        log.info("%d s of audio (%d scenes); %d faults, seed %d:", total_s, scenes,
                 len(faults), args.seed)
        for fault in faults:
            log.info("  %-8s at %5d s measured, down %.2f s", fault.kind, fault.at_s,
                     fault.down_s)
        started = time.monotonic()
        try:
            faulted = FaultRun(work / "faulted", audio, total_s, args.pace,
                               timeout_s=3600).run(faults)
            reference = FaultRun(work / "reference", audio, total_s, args.pace,
                                 timeout_s=3600).run(frames=faulted.published)
        except FaultRunError as exc:
            print(f"fault_inject: the run could not finish: {exc}", file=sys.stderr)
            return 2
        problems = differences(faulted, reference, total_s)
        summary = {
            "audio_s": total_s,
            "seed": args.seed,
            "kills": {kind: sum(f.kind == kind for f in faulted.faults_done) for kind in KINDS},
            "frames_stored": faulted.frame_count,
            "frames_published": len(faulted.published),
            "events": [len(faulted.events), len(reference.events)],
            "windows": [len(faulted.windows), len(reference.windows)],
            "windows_verified": faulted.verified_windows,
            "outbox_integrity": faulted.integrity,
            "sensor_started_at_s": faulted.sensor_starts,
            "wall_s": round(time.monotonic() - started, 1),
            "problems": problems,
        }
        print(json.dumps(summary, indent=2))
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
