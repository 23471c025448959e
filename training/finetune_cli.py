"""``barkwatch-train finetune``: its options and its run. Kept apart from
:mod:`training.finetune` so that the command line loads without PyTorch (the ``train`` extra)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import training.finetune_recipe
from training.finetune_recipe import Recipe


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
    parser.add_argument("--every", type=int, default=1, metavar="N",
                        help="use every N-th clip only (a quick look; default 1: all)")
    helps = {"copies": "placed copies of each clip for training",
             "train_from": "first separable block trained (1-13; the rest stays frozen)",
             "epochs": "passes over the training examples", "batch_examples":
             "examples per step", "learning_rate": "Adam's rate for the blocks",
             "head_learning_rate": "Adam's rate for the dog output", "folds":
             "folds of sources (each trained without its sources)", "seed": "seed of every "
             "draw", "threads": "PyTorch threads"}
    for field, default in Recipe().__dict__.items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(default), default=default,
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
    if min(args.copies + 1, args.epochs, args.batch_examples, args.folds - 1, args.every,
           args.threads) < 1:
        parser.error("--copies must be 0 or more, --folds 2 or more, and --epochs, "
                     "--batch-examples, --every and --threads 1 or more")
    from training.finetune import evaluate  # PyTorch: only when fine-tuning

    recipe = Recipe(**{f: getattr(args, f) for f in Recipe().__dict__})
    clips = read_corpora(args.corpus)[:: args.every]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    text = json.dumps(evaluate(clips, recipe), indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0
