"""Untouched YAMNet as a clip detector: the baseline any trained dog head must beat (issue 24).

    .venv/bin/python -m training.yamnet_baseline ../shared/corpus/train ../shared/corpus/extra \
        [--out yamnet_baseline.json]

A clip's score is the highest dog score (sigmoid, maximum over YAMNet's seven dog classes) over
its patches, the clip padded as YAMNet pads it. Reports clip AUPRC and recall at 1, 2 and 5 %
false alarms per corpus and pooled, and a leave-one-source-out table (the manifests' ``source``
column, else ``repo``): the network is not trained on the corpus, so its pooled
leave-one-source-out figure is the pooled one, and what a trained model must beat on each
left-out source is that source's own figures. A source's dog recall and false alarms are read
at the pooled 2 %-false-alarm threshold; AUPRC where the source has both classes. Dog snoring
is left out, as in training.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.detect import YamnetNetwork
from analyzer.offline import average_precision, recall_at_far
from sensor.yamnet_features import clip_patches
from training.corpus import Clip, load_audio, read_manifest

LOG = logging.getLogger(__name__)
FALSE_ALARM_RATES = (0.01, 0.02, 0.05)


@dataclass(frozen=True)
class ScoredClip:
    clip: Clip
    corpus: str
    source: str
    dog_score: float


def sources_of(corpus: Path) -> dict[str, str]:
    """clip_id -> source (the ``source`` column, else ``repo``, else ``group``)."""
    with (corpus / "manifest.csv").open(newline="") as file:
        return {
            row["clip_id"]: row.get("source") or row.get("repo") or row["group"]
            for row in csv.DictReader(file)
        }


def score_corpus(network: YamnetNetwork, corpus: Path) -> list[ScoredClip]:
    """Every clip of ``corpus`` with its clip dog score."""
    clips = read_manifest(corpus)
    sources = sources_of(corpus)
    scored = []
    for k, clip in enumerate(clips, 1):
        patches = clip_patches(load_audio(clip.path))
        score = float(network.dog_scores(network.run(patches)).max())
        scored.append(ScoredClip(clip, corpus.name, sources[clip.clip_id], score))
        if k % 200 == 0:
            LOG.info("%s: %d of %d clips scored", corpus.name, k, len(clips))
    return scored


def figures(scored: list[ScoredClip]) -> dict[str, Any]:
    """Clip AUPRC and recall at each false-alarm rate (None where a class is missing)."""
    labels = np.array([s.clip.is_dog for s in scored])
    scores = np.array([s.dog_score for s in scored])
    result: dict[str, Any] = {"dog": int(labels.sum()), "not_dog": int((~labels).sum())}
    both = 0 < labels.sum() < labels.size
    result["auprc"] = round(average_precision(labels, scores), 4) if both else None
    for far in FALSE_ALARM_RATES:
        recall, threshold = recall_at_far(labels, scores, far) if both else (None, None)
        result[f"recall_at_{far:.0%}_fa"] = None if recall is None else round(recall, 4)
        result[f"threshold_at_{far:.0%}_fa"] = None if threshold is None else round(threshold, 4)
    return result


def leave_one_source_out(scored: list[ScoredClip], threshold: float) -> dict[str, Any]:
    """Per source: its own figures and, at the pooled ``threshold``, dog recall and the
    fraction of its non-dog clips above it (false alarms)."""
    by_source: dict[str, list[ScoredClip]] = defaultdict(list)
    for item in scored:
        by_source[f"{item.corpus}/{item.source}"].append(item)
    table = {}
    for source, items in sorted(by_source.items()):
        row = figures(items)
        dogs = [s.dog_score for s in items if s.clip.is_dog]
        others = [s.dog_score for s in items if not s.clip.is_dog]
        row["dog_recall_at_pooled_2%_fa"] = (
            round(float(np.mean(np.array(dogs) > threshold)), 4) if dogs else None
        )
        row["false_alarms_at_pooled_2%_fa"] = (
            round(float(np.mean(np.array(others) > threshold)), 4) if others else None
        )
        table[source] = row
    return table


def confusers(scored: list[ScoredClip], threshold: float, n: int = 15) -> list[dict[str, Any]]:
    """The non-dog clips that score highest, with their labels."""
    negatives = sorted((s for s in scored if not s.clip.is_dog), key=lambda s: -s.dog_score)
    return [
        {"clip_id": s.clip.clip_id, "label": s.clip.label, "dog_score": round(s.dog_score, 4)}
        for s in negatives[:n]
        if s.dog_score > threshold
    ]


def baseline(corpora: list[Path]) -> dict[str, Any]:
    """The whole report as a JSON-ready dict."""
    network = YamnetNetwork()
    scored: list[ScoredClip] = []
    report: dict[str, Any] = {"detector": "YAMNet untouched, max over dog classes per clip"}
    for corpus in corpora:
        these = score_corpus(network, corpus)
        report[corpus.name] = figures(these)
        scored += these
    report["pooled"] = figures(scored)
    threshold = report["pooled"]["threshold_at_2%_fa"]
    report["leave_one_source_out"] = leave_one_source_out(scored, threshold)
    report["top_confusers"] = confusers(scored, threshold)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpora", nargs="+", type=Path, help="folders with manifest.csv")
    parser.add_argument("--out", type=Path, help="write the report as JSON here too")
    args = parser.parse_args(argv)
    for corpus in args.corpora:
        if not (corpus / "manifest.csv").is_file():
            parser.error(f"{corpus}: no manifest.csv (a corpus folder is expected)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report = baseline(args.corpora)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
