"""``barkwatch-train finetune``: its options and its run. Kept apart from
:mod:`training.finetune` so that the command line loads without PyTorch (the ``train`` extra)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import training.finetune_recipe
from training.finetune_recipe import SNR_OF, Recipe


def add_finetune_parser(commands: Any) -> Any:
    """``barkwatch-train finetune``: the options of :class:`Recipe`, the corpora, --out."""
    import argparse

    parser: argparse.ArgumentParser = commands.add_parser(
        "finetune", help="fine-tune YAMNet's top blocks for dogs; judge them on left-out "
        "sources against untouched YAMNet",
        description=training.finetune_recipe.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, action="append", required=True, metavar="DIR",
                        help="folder with manifest.csv and audio (repeatable)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    parser.add_argument("--export", type=Path, metavar="ONNX",
                        help="instead of judging every fold: train the sensor's network on all "
                        "sources but those of --held-out-fold, write it here as ONNX, judge it "
                        "on the held-out fold")
    parser.add_argument("--held-out-fold", type=int, default=None, metavar="K",
                        help="with --export: the fold (0 to --folds - 1) kept out of training "
                        "(default: none, train on every source)")
    parser.add_argument("--exclude-fold", type=int, action="append", default=[], metavar="K",
                        help="with --export: drop every source of fold K before anything "
                        "(repeatable; not the held-out fold): a learning-curve control, the "
                        "same recipe on less data, judged on the same held-out fold")
    parser.add_argument("--exclude-source", action="append", default=[], metavar="KEY",
                        help="with --export: drop every clip of this source (its key as the "
                        "report's held_out_sources write it, e.g. train/us8k; repeatable)")
    parser.add_argument("--every", type=int, default=1, metavar="N",
                        help="use every N-th clip only (a quick look; default 1: all)")
    helps = {"copies": "placed copies of each dog clip for training",
             "other_copies": "placed copies of each other clip for training (hard "
             "negatives)", "bed_pieces": "10 s pieces of the training beds alone (no dog) "
             "for training",
             "train_from": "first separable block trained (1-13; the rest stays frozen)",
             "epochs": "passes over the training examples", "batch_examples":
             "examples per step", "learning_rate": "Adam's rate for the blocks",
             "head_learning_rate": "Adam's rate for the dog output", "folds":
             "folds of sources (each trained without its sources)", "seed": "seed of every "
             "draw and of the sources' folds", "training_seed": "when not 0, the seed of "
             "the training copies and the training instead (same folds, same evaluation "
             "copies: a second run of one recipe)", "threads": "PyTorch threads",
             "snr_of": "what a training copy's SNR is of: clip (its RMS over the whole clip) "
             "or bark (its prominent steps, as the soundscapes measure a bark's own SNR)",
             "voiced_copies": "placed copies of each dog clip with a voice over it (speech "
             "of the training sources, the dog -3..+10 dB over it; needs --export)",
             "voiced_other_copies": "the same of each other clip (so that a voice says "
             "nothing about a dog; needs --export)"}
    for field, default in Recipe().__dict__.items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(default), default=default,
                            choices=SNR_OF if field == "snr_of" else None,
                            help=f"{helps[field]} (default {default})")
    return parser


def run_finetune(args: Any, parser: Any) -> int:
    """Check the options, run :func:`evaluate`, print (and write) the figures as JSON."""
    import json

    from training.head_data import read_corpora

    for corpus in args.corpus:
        if not (corpus / "manifest.csv").is_file():
            parser.error(f"{corpus}/manifest.csv not found")
    if not 1 <= args.train_from <= 13:
        parser.error(f"--train-from must be a separable block 1-13, not {args.train_from}")
    if min(args.copies + 1, args.other_copies + 1, args.bed_pieces + 1,
           args.voiced_copies + 1, args.voiced_other_copies + 1, args.epochs,
           args.batch_examples, args.folds - 1, args.every, args.threads) < 1:
        parser.error("--copies, --other-copies, --bed-pieces and --voiced[-other]-copies must "
                     "be 0 or more, --folds 2 or more, and --epochs, --batch-examples, --every and "
                     "--threads 1 or more")
    if args.held_out_fold is not None and not (
            args.export and 0 <= args.held_out_fold < args.folds):
        parser.error("--held-out-fold needs --export and a fold from 0 to --folds - 1")
    bad = [k for k in args.exclude_fold if not 0 <= k < args.folds or k == args.held_out_fold]
    if (args.voiced_copies or args.voiced_other_copies) and not args.export:
        parser.error("--voiced-copies and --voiced-other-copies need --export: the voices laid "
                     "over training copies must come from sources out of the held-out fold, "
                     "which only --export has")
    if args.exclude_fold and not args.export:
        parser.error("--exclude-fold needs --export")
    if args.exclude_source and not args.export:
        parser.error("--exclude-source needs --export")
    if bad:
        parser.error(f"--exclude-fold {bad[0]}: a fold from 0 to --folds - 1, not the "
                     "held-out one")
    if args.export and not args.export.parent.is_dir():
        parser.error(f"--export: folder {args.export.parent} does not exist")
    from training.finetune import evaluate, train_sensor_network  # PyTorch: only here

    recipe = Recipe(**{f: getattr(args, f) for f in Recipe().__dict__})
    clips = read_corpora(args.corpus)[:: args.every]
    if args.exclude_fold:
        from training.finetune import fold_of_source

        clips = [c for c in clips if fold_of_source(c.source_key, recipe.folds, recipe.seed)
                 not in args.exclude_fold]
    unknown = sorted(set(args.exclude_source) - {c.source_key for c in clips})
    if unknown:
        parser.error(f"--exclude-source {unknown[0]}: no clip of the corpora has that source")
    clips = [c for c in clips if c.source_key not in args.exclude_source]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.export:
        report = train_sensor_network(clips, recipe, args.export, args.held_out_fold)
    else:
        report = evaluate(clips, recipe)
    report["excluded_folds"] = sorted(args.exclude_fold)
    report["excluded_sources"] = sorted(args.exclude_source)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0
