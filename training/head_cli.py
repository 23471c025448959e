"""``barkwatch-train head``: fit the dog head on YAMNet's outputs, evaluate it leaving one source
out, and write it with its metrics.

    barkwatch-train head --corpus ../shared/corpus/train --corpus ../shared/corpus/extra \\
        [--out models/dog_head.npz] [--hidden 0] [--fusion learned] [--seed 1]

Builds (or reads from ``~/.cache/barkwatch/head``) the mixed training streams, the clean clips
and the soundscapes (:mod:`training.head_data`; about an hour on two loaded cores the first
time; the heads of the leave-one-source-out folds are cached there too), runs the
leave-one-source-out evaluation (:mod:`training.head_eval`) of the head recipe against the
bundled CNN and untouched YAMNet, fits the shipped head on every source, stores the fusion
weights and the event thresholds chosen in that evaluation in the head file, and writes the
evaluation beside it (``OUT`` with ``.metrics.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.detect.head import DEFAULT_HEAD_PATH, DogHead
from training import head_data
from training.head import HeadRecipe, fit_head
from training.head_eval import YAMNET_VETO, evaluate

log = logging.getLogger(__name__)

HEAD_MAJOR = "1.0"


def add_head_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "head", help="fit the dog head on YAMNet embeddings, evaluate it leaving one source out",
        description="Fit the dog head (YAMNet embeddings and class scores -> dog score per "
        "patch) with mixed streams, evaluate it leaving one source out against the CNN and "
        "untouched YAMNet, and write it with its metrics.",
    )  # fmt: skip
    parser.add_argument("--corpus", type=Path, action="append", required=True, metavar="DIR",
                        help="folder with manifest.csv and audio (repeatable)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True,
                        help="head file to write, its metrics beside it; to replace the "
                             f"bundled head, name it: --out {DEFAULT_HEAD_PATH}")  # fmt: skip
    parser.add_argument(
        "--hidden",
        type=int,
        default=0,
        help="hidden units of the head; 0 = logistic (default %(default)s)",
    )
    parser.add_argument(
        "--no-class-scores",
        action="store_true",
        help="the head reads the embedding only, not YAMNet's class scores",
    )
    parser.add_argument("--fusion", choices=("min", "max", "logistic"), default="min",
                        help="how the head's score joins the CNN's: min (an event needs both), "
                        "max, or a logistic fit (default %(default)s)")  # fmt: skip
    parser.add_argument("--yamnet-veto", type=float, default=None, metavar="B",
                        help="cap the head's patch scores at sigmoid(logit(untouched YAMNet's "
                        "dog score) + B), so that YAMNet's no stands (with --fusion min); "
                        "without it the veto is evaluated at B = 4.5 but not shipped")  # fmt: skip
    parser.add_argument("--false-alarm-budget", type=float, default=5.0, metavar="PER_HOUR",
                        help="event thresholds: the best F1 with at most this many false alarms "
                        "per hour on the confuser soundscapes (default %(default)s)")  # fmt: skip
    parser.add_argument("--epochs", type=int, default=8, help="training epochs")
    parser.add_argument("--seed", type=int, default=1, help="seed of every draw")
    parser.add_argument(
        "--dog-copies", type=int, default=3, help="mixed streams per dog clip (default %(default)s)"
    )
    parser.add_argument(
        "--other-copies",
        type=int,
        default=1,
        help="mixed streams per other clip (default %(default)s)",
    )
    return parser


def head_version(head: DogHead) -> str:
    """``dog-head-<major>-<digest of the weights, fusion and YAMNet veto>``."""
    digest = hashlib.sha256()
    for w, b in head.layers:
        digest.update(w.tobytes())
        digest.update(b.tobytes())
    if head.fusion is not None:
        digest.update(np.asarray(head.fusion, np.float64).tobytes())
    if head.yamnet_veto is not None:  # changes every score: a head with a veto is another head
        digest.update(np.float64(head.yamnet_veto).tobytes())
    return f"dog-head-{HEAD_MAJOR}-{digest.hexdigest()[:8]}"


def run_head(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    for folder in args.corpus:
        if not (folder / "manifest.csv").is_file():
            parser.error(f"--corpus {folder}: no manifest.csv there")
    if args.hidden < 0 or args.epochs < 1:
        parser.error("--hidden must be 0 or more and --epochs at least 1")
    veto = args.yamnet_veto
    if veto is not None and (args.fusion != "min" or not math.isfinite(veto)):
        parser.error("--yamnet-veto needs --fusion min and a finite number")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("sensor").setLevel(logging.ERROR)  # 16 kHz corpus: a known warning
    started = time.monotonic()
    corpora = list(args.corpus)
    name = f"train-v2-s{args.seed}-d{args.dog_copies}-o{args.other_copies}"
    train = head_data.cached(corpora, name, head_data.build_training_streams, args.seed,
                             args.dog_copies, args.other_copies)  # fmt: skip
    clean = head_data.cached(corpora, "clean", head_data.build_clean_clips)
    scapes = head_data.cached(corpora, f"soundscapes-s{args.seed}",
                              head_data.build_soundscapes, args.seed)  # fmt: skip
    snr_path = head_data.cache_path(corpora, f"own-snr-s{args.seed}")
    if not snr_path.is_file():
        log.info("making the dog soundscapes again for their steps' own SNR (%s)", snr_path)
        head_data.build_own_snrs(head_data.read_corpora(corpora), snr_path, args.seed)
    own_snr = head_data.own_snrs(snr_path, scapes)
    recipe = HeadRecipe(args.hidden, not args.no_class_scores, args.epochs, args.seed)
    folds = head_data.cache_path(corpora, f"heads-{name}-{recipe.name}-e{args.epochs}")
    report, fusion = evaluate(train, clean, scapes, recipe, folds.with_suffix(""),
                              budget=args.false_alarm_budget, own_snr=own_snr,
                              veto=YAMNET_VETO if args.yamnet_veto is None else args.yamnet_veto,
                              )  # fmt: skip
    grouped, _ = evaluate(train, clean, None, recipe, folds.with_name(folds.stem + "-grouped"),
                          split="group")  # fmt: skip
    report["grouped_split"] = grouped["clips"]
    detector = {"min": "fused_min", "max": "fused_max", "logistic": "fused_learned"}[args.fusion]
    if args.yamnet_veto is not None:
        detector = "fused_min_veto"
    chosen = report["soundscapes"][detector]["chosen"]
    fitted = fit_head(train, np.arange(len(train.patch_labels)), recipe, "unnamed")
    head = dataclasses.replace(
        fitted, fusion=fusion if args.fusion == "logistic" else None, fusion_kind=args.fusion,
        yamnet_veto=args.yamnet_veto,
        on_threshold=chosen["on"], off_threshold=chosen["off"],
    )  # fmt: skip
    head = dataclasses.replace(head, version=head_version(head))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    head.save(args.out)
    report |= {
        "head_version": head.version, "shipped_detector": detector, "thresholds": chosen,
        "corpora": [str(c) for c in corpora], "training_streams": len(train.meta),
        "training_patches": int(np.sum(train.patch_labels >= 0)),
        "command": "barkwatch-train head " + " ".join(
            f"--corpus {c}" for c in corpora) + f" --hidden {args.hidden} --fusion "
            f"{args.fusion} --seed {args.seed} --epochs {args.epochs} "
            f"--false-alarm-budget {args.false_alarm_budget}"
            + (" --no-class-scores" if args.no_class_scores else "")
            + (f" --yamnet-veto {args.yamnet_veto}" if args.yamnet_veto is not None else ""),
        "seconds": round(time.monotonic() - started),
    }  # fmt: skip
    metrics = args.out.with_suffix(".metrics.json")
    metrics.write_text(json.dumps(report, indent=1) + "\n")
    log.info("wrote %s (%s) and %s", args.out, head.version, metrics)
    return 0
