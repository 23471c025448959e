"""``barkwatch-train``: the training set and the classifier from a corpus, with two commands.

    barkwatch-train trainset CORPUS_DIR OUT.npz [--seed 1] [--jobs 2] [...]
    barkwatch-train fit --corpus /work/shared/corpus/train \\
        [--trainset /tmp/trainset.npz] [--out models/dog_classifier.npz] [--seed 1]
        [--extra-corpus DIR --extra-copies N]

``trainset`` turns a folder of audio plus a manifest into classifier training examples
(:mod:`training.trainset`). ``fit`` is one seeded command: it builds the training set when
``--trainset`` does not exist yet (about 26 minutes on 2 cores), computes the network's inputs
with ``analyzer.detect.classifier`` (the code the analyzer runs), trains the small convolutional
network with PyTorch on random 5 s crops (per-step logistic loss plus a loss on each crop's
highest score, feature-level band shifts and masks), folds its batch norms and exports it to a
plain ``.npz`` that numpy runs, checks the export against PyTorch, validates on the held-out
groups with the streaming scorer and the event tracker exactly as deployed, and writes
``models/dog_classifier.metrics.json``. ``--teacher MODEL`` (repeatable) adds a loss towards
other models' mean score at every step (distillation). PyTorch is a training-only dependency
(``[train]``), imported only once ``fit`` trains.
Seeded (numpy and torch generators); the same seed gave the same weights on a one-epoch run.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.cli.progress import progress_bar
from analyzer.config import DetectorSettings
from analyzer.detect import (
    DEFAULT_MODEL_PATH,
    N_BANDS,
    N_MELS,
    ClassifierError,
    DogModel,
    load_model,
    logits_of_stream,
)
from training import trainset
from training.corpus import licence_counts, read_manifests
from training.finetune_cli import add_finetune_parser, run_finetune
from training.fit import (
    BALANCE,
    DISTIL_WEIGHT,
    EMA_DECAY,
    EPOCHS,
    MIL_WEIGHT,
    balance_weights,
    fit_network,
    stream_inputs,
    teacher_targets,
    training_subset,
)
from training.head_cli import add_head_parser, run_head
from training.network import (
    ARCHITECTURE,
    DROPOUT,
    context_steps,
    export_network,
    for_input_bands,
    widened,
)
from training.privacy_cli import add_privacy_parser, run_privacy
from training.validate import HOP_S, validate

log = logging.getLogger(__name__)


def _start_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("sensor.frames").setLevel(logging.ERROR)  # 16 kHz corpus: known


def _require_manifests(parser: argparse.ArgumentParser, folders: list[Path]) -> None:
    """End with a message naming the first corpus folder without a ``manifest.csv``."""
    for folder in folders:
        if not (folder / "manifest.csv").is_file():
            parser.error(f"{folder}/manifest.csv not found")


def add_trainset_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "trainset", help="build the training set (.npz) from a corpus folder",
        description="Turn a folder of audio plus a manifest into classifier training examples.",
    )  # fmt: skip
    parser.add_argument("corpus", type=Path, help="folder with manifest.csv and the audio")
    parser.add_argument("out", type=Path, help="output .npz")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the split and every random draw (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="worker processes making streams (default %(default)s)")
    parser.add_argument("--val-fraction", type=float, default=0.2,
                        help="fraction of the recordings (groups) held out for validation "
                             "(default %(default)s)")  # fmt: skip
    parser.add_argument("--dog-copies", type=int, default=8, help="augmented copies per dog clip")
    parser.add_argument("--other-copies", type=int, default=5, help="copies per other clip")
    parser.add_argument("--rare-copy-factor", type=int, default=trainset.RARE_COPY_FACTOR,
                        help="rare labels get up to this many times the copies (1: off)")
    parser.add_argument("--no-lead-in-fraction", type=float, default=trainset.NO_LEAD_IN_FRACTION,
                        help="fraction of clip streams that start with the clip itself")
    parser.add_argument("--extra-negatives", type=int, default=1000,
                        help="background-only and synthetic streams")  # fmt: skip
    parser.add_argument("--tonal-negatives", type=int, default=0, metavar="N",
                        help="N more training streams of narrow-band sounds: bird-like chirps, "
                        "alarm beeps, whistles, tones (validation keeps only real clips and the "
                        "synthetic negatives)")  # fmt: skip
    parser.add_argument("--extra-corpus", type=Path, action="append", default=[], metavar="DIR",
                        help="another folder with manifest.csv and audio (repeatable)")
    parser.add_argument("--extra-copies", type=int, metavar="N",
                        help="augmented copies per clip of the extra corpora (default: as the "
                        "main corpus's dog or other copies)")  # fmt: skip
    parser.add_argument("--held-out", type=Path, metavar="REPORT",
                        help="leave out every clip of the sources a fine-tuning report "
                        "(barkwatch-train finetune --export --held-out-fold K) kept out, and the "
                        "soundscapes' held-out beds: a CNN judged on that fold's soundscapes "
                        "(benchmarks/judge_soundscapes.py --sensor-cnn) never heard them")
    _add_quiet(parser)
    return parser


def held_out_clip_ids(report: Path, corpora: list[Path]) -> frozenset[str]:
    """The ids of the clips a judge of ``report``'s held-out fold may use: its sources' clips
    and every held-out background bed (:func:`training.head_data.is_held_out_background`);
    ValueError naming the report when it holds no sources."""
    from training.head_data import held_out_sources, is_held_out_background, read_corpora

    held = held_out_sources(report)
    return frozenset(c.clip.clip_id for c in read_corpora(corpora)
                     if c.source_key in held or is_held_out_background(c))  # fmt: skip


def _add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bar (shown only on a terminal)")


def run_trainset(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.tonal_negatives < 0:
        parser.error(f"--tonal-negatives must be 0 or more, not {args.tonal_negatives}")
    _start_logging()
    _require_manifests(parser, [args.corpus, *args.extra_corpus])
    left_out: frozenset[str] = frozenset()
    if args.held_out is not None:
        try:
            left_out = held_out_clip_ids(args.held_out, [args.corpus, *args.extra_corpus])
        except ValueError as error:
            parser.error(f"--held-out {error}")
        log.info("--held-out %s: %d clips left out", args.held_out, len(left_out))
    with progress_bar("training set", "streams", args.quiet) as progress:
        trainset.build(args.corpus, args.out, seed=args.seed, jobs=args.jobs,
                       val_fraction=args.val_fraction, dog_copies=args.dog_copies,
                       other_copies=args.other_copies, extra_negatives=args.extra_negatives,
                       rare_copy_factor=args.rare_copy_factor,
                       no_lead_in_fraction=args.no_lead_in_fraction,
                       extra_corpora=args.extra_corpus, extra_copies=args.extra_copies,
                       tonal_negatives=args.tonal_negatives, progress=progress,
                       left_out=left_out, left_out_note=f"held out by {args.held_out}"
                       if left_out else "")  # fmt: skip
    return 0


def corpora_of(corpus: Path, config: dict[str, Any]) -> list[Path]:
    """The main corpus and the extra ones the training set was built from (its config)."""
    return [corpus, *(Path(folder) for folder in config.get("extra_corpora", []))]


def load_models(parser: argparse.ArgumentParser, option: str, paths: list[Path]
                ) -> tuple[DogModel, ...]:  # fmt: skip
    """The model files named by ``option``; one that cannot be loaded ends with its message."""
    try:
        return tuple(load_model(path) for path in paths)
    except ClassifierError as exc:
        parser.error(f"{option}: {exc}")


def _channel_list(text: str) -> tuple[int, ...]:
    """``--band-channels`` as a tuple of ints ("8,16,16")."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated channel counts such as 8,16,16, not {text!r}"
        ) from None


def add_fit_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "fit", help="train the classifier, validate it on held-out recordings, write its card",
        description="Train the dog-vocalization classifier, validate it on held-out recordings, "
        "write its card.",
    )  # fmt: skip
    parser.add_argument("--corpus", type=Path, required=True, help="folder with manifest.csv")
    parser.add_argument("--trainset", type=Path, default=Path("/tmp/barkwatch-trainset.npz"),
                        help="training set (built here if missing)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True,
                        help="model file to write, its metrics beside it (.metrics.json); "
                             "to replace the bundled model, name it: "
                             f"--out {DEFAULT_MODEL_PATH}")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the training draws and of a training set built here "
                             "(default %(default)s)")  # fmt: skip
    parser.add_argument("--epochs", type=int, default=EPOCHS,
                        help="passes of (training streams / 64) batches (default %(default)s)")
    parser.add_argument("--mil-weight", type=float, default=MIL_WEIGHT,
                        help="weight of the loss on each crop's highest score (false alarms)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="worker processes for a training set built here "
                             "(default %(default)s)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2, help="torch threads for training")
    parser.add_argument("--validate", type=Path, nargs="+", metavar="MODEL",
                        help="train nothing: validate this model file on the training set's "
                        "held-out streams and print the metrics (several files: their mean "
                        "score, an ensemble)")  # fmt: skip
    parser.add_argument("--extra-corpus", type=Path, action="append", default=[], metavar="DIR",
                        help="another folder with manifest.csv for the training set (repeatable;"
                        " see barkwatch-train trainset)")  # fmt: skip
    parser.add_argument("--extra-copies", type=int, metavar="N",
                        help="augmented copies per clip of the extra corpora")
    parser.add_argument("--teacher", type=Path, action="append", default=[], metavar="MODEL",
                        help="distil from these model files (repeatable): their mean score at "
                        "every training step becomes a second target")  # fmt: skip
    parser.add_argument("--distil-weight", type=float, default=DISTIL_WEIGHT,
                        help="weight of the loss towards the teachers' scores (with --teacher)")
    parser.add_argument("--band-channels", type=_channel_list, metavar="A,B,C",
                        default=",".join(str(out) for kind, out, *_ in ARCHITECTURE
                                         if kind == "conv2d"),
                        help="output channels of the three band convolutions (default "
                             "%(default)s); the cost per step grows with their products")
    parser.add_argument("--time-channels", type=int, metavar="N",
                        default=ARCHITECTURE[-2][1],
                        help="channels of the time convolutions (default %(default)s)")
    parser.add_argument("--input-bands", type=int, choices=(N_BANDS, N_MELS), default=N_BANDS,
                        help=f"{N_BANDS}: adjacent mel bands averaged in pairs (default); "
                             f"{N_MELS}: every mel band, the first band convolution then pools "
                             "by 4 (finer harmonics for about the same cost)")
    parser.add_argument("--dropout", type=float, default=DROPOUT, metavar="P",
                        help="dropout after each hidden time convolution (default %(default)s)")
    parser.add_argument("--train-fraction", type=float, default=1.0, metavar="F",
                        help="train on this fraction of the training recordings (whole "
                             "recordings, seeded by --seed), for a learning curve; raise "
                             "--epochs by 1/F to keep the number of steps; default %(default)s")
    parser.add_argument("--ema", type=float, default=EMA_DECAY, metavar="DECAY",
                        help="export the exponential moving average of the weights, this "
                             "decay per step (0.999: about the last 1,000 steps, 9 epochs of "
                             "the bundled recipe); default %(default)s: the last weights")
    parser.add_argument("--balance", type=float, default=BALANCE, metavar="POWER",
                        help="draw rare labels more often: a stream's weight is its label's "
                             "stream count to the power -POWER (0: all alike, 0.5: root, "
                             "1: every label alike); default %(default)s")
    _add_quiet(parser)
    return parser


def run_fit(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not 0.0 <= args.balance <= 1.0:
        parser.error(f"--balance must be between 0 and 1, not {args.balance}")
    if not 0.0 <= args.dropout < 1.0:
        parser.error(f"--dropout must be at least 0 and under 1, not {args.dropout}")
    if not 0.0 < args.train_fraction <= 1.0:
        parser.error(f"--train-fraction must be over 0 and at most 1, not {args.train_fraction}")
    if not 0.0 <= args.ema < 1.0:
        parser.error(f"--ema must be at least 0 and under 1, not {args.ema}")
    try:
        architecture = widened(args.band_channels, args.time_channels)
    except ValueError as exc:
        parser.error(f"--band-channels/--time-channels: {exc}")
    architecture = for_input_bands(args.input_bands, architecture)  # a choice argparse checked
    input_pool = N_MELS // args.input_bands
    _start_logging()
    if args.validate is not None:
        if not args.trainset.exists():
            parser.error(f"--validate needs an existing --trainset ({args.trainset} not found)")
        _require_manifests(parser, [args.corpus])
        mel, labels, offsets, meta, config = trainset.load_trainset(args.trainset)
        settings = DetectorSettings()
        metrics = validate(load_models(parser, "--validate", args.validate), mel, labels,
                           offsets, meta, settings, int(config["seed"]),
                           corpora_of(args.corpus, config), config["val_fraction"])  # fmt: skip
        print(json.dumps(metrics, indent=2))
        return 0
    teachers = load_models(parser, "--teacher", args.teacher)
    for teacher in teachers:
        if teacher.input_pool != input_pool:
            parser.error(f"--teacher {teacher.version} reads {teacher.input_bands} input bands, "
                         f"not the {args.input_bands} asked for (--input-bands)")
    # Validation reads the corpus after training: a missing one is refused before, not after.
    _require_manifests(parser, [args.corpus, *args.extra_corpus])
    distil_weight = args.distil_weight if teachers else 0.0
    import torch

    torch.set_num_threads(args.threads)
    started = time.monotonic()
    if not args.trainset.exists():
        with progress_bar("training set", "streams", args.quiet) as progress:
            trainset.build(args.corpus, args.trainset, seed=args.seed, jobs=args.jobs,
                           extra_corpora=args.extra_corpus, extra_copies=args.extra_copies,
                           progress=progress)  # fmt: skip
    mel, labels, offsets, meta, config = trainset.load_trainset(args.trainset)
    corpora = corpora_of(args.corpus, config)
    if {str(f) for f in args.extra_corpus} != {str(f) for f in corpora[1:]}:
        log.warning("%s was built from the extra corpora %s, not from --extra-corpus %s: "
                    "training on it as it is (remove it to rebuild)", args.trainset,
                    [str(f) for f in corpora[1:]], [str(f) for f in args.extra_corpus])  # fmt: skip
    log.info("%d streams, %.2f h", len(meta), mel.shape[0] * HOP_S / 3600)
    context = context_steps(architecture)
    inputs = stream_inputs(mel, offsets, context, input_pool)
    stream_labels = [labels[offsets[i] : offsets[i + 1]] for i in range(len(meta))]
    log.info("inputs done at %.0f s", time.monotonic() - started)
    train = [i for i, m in enumerate(meta) if m["split"] == "train"]
    if args.train_fraction < 1.0:
        train = [train[k] for k in training_subset([meta[i] for i in train],
                                                   args.train_fraction, args.seed)]  # fmt: skip
        log.info("training on %d streams, the clips' from %d recordings (--train-fraction %g)",
                 len(train), len({meta[i]["group"] for i in train if meta[i]["kind"] == "clip"}),
                 args.train_fraction)  # fmt: skip
    val = [i for i, m in enumerate(meta) if m["split"] == "val"]
    soft = None
    if teachers:
        soft = teacher_targets(teachers, [inputs[i] for i in train], context)
        log.info("teacher scores of %d streams from %s done at %.0f s", len(train),
                 ", ".join(t.version for t in teachers), time.monotonic() - started)  # fmt: skip
    weights = None
    if args.balance:
        weights = balance_weights([meta[i]["label"] for i in train], args.balance)
    fit_started = time.monotonic()
    with progress_bar("fit", "steps", args.quiet) as progress:
        net = fit_network([inputs[i] for i in train], [stream_labels[i] for i in train],
                          args.seed, args.epochs,
                          ([inputs[i] for i in val], [stream_labels[i] for i in val],
                           [bool(meta[i]["is_dog"]) for i in val]),
                          args.mil_weight, soft, distil_weight, weights, architecture,
                          args.dropout, args.ema, progress)  # fmt: skip
    fit_s = time.monotonic() - fit_started
    log.info("network fitted in %.0f s", fit_s)
    metadata = {
        "trained_on": ", ".join(str(c) for c in corpora), "trainset_config": config,
        "architecture": [list(layer) for layer in architecture], "epochs": args.epochs,
        "seed": args.seed, "training_streams": len(train), "torch": torch.__version__,
        "mil_weight": args.mil_weight,
        "teachers": [t.version for t in teachers],
        "distil_weight": distil_weight,
        "balance": args.balance,
        "dropout": args.dropout,
        "input_bands": args.input_bands,
        "ema_decay": args.ema,
        "train_fraction": args.train_fraction,
    }  # fmt: skip
    model = export_network(net, metadata, input_pool)
    check = val[0]
    with torch.no_grad():
        reference = net(torch.from_numpy(inputs[check].astype(np.float32).transpose(2, 1, 0)
                                         [None].copy()))[0, 0].numpy()  # fmt: skip
    numpy_logits = logits_of_stream(model, inputs[check][context:-context].astype(np.float32))
    log.info("numpy export vs torch: max logit difference %.2e",
             float(np.abs(numpy_logits - reference).max()))  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save(args.out)
    log.info("wrote %s (%s, %d bytes)", args.out, model.version, args.out.stat().st_size)
    settings = DetectorSettings()
    metrics = validate(model, mel, labels, offsets, meta, settings, int(config["seed"]),
                       corpora, config["val_fraction"])  # fmt: skip
    clips = read_manifests(corpora[0], corpora[1:])
    metrics.update({"model_version": model.version, "licences": licence_counts(clips),
                    "training_hours": round(float(np.diff(offsets)[train].sum()) * HOP_S / 3600,
                                            2),  # fmt: skip
                    "fit_seconds": round(fit_s),
                    "train_seconds_total": round(time.monotonic() - started),
                    "settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__},
                    })  # fmt: skip
    metrics_path = args.out.with_suffix(".metrics.json")
    metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
    log.info("metrics: %s", json.dumps(metrics, indent=1))
    return 0


Command = Callable[[argparse.Namespace, argparse.ArgumentParser], int]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="barkwatch-train",
        description="Train Barkwatch's dog-vocalization classifier: build a training set from "
        "a corpus folder (trainset), then fit, validate and export the network (fit).",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    handlers: dict[str, tuple[Command, argparse.ArgumentParser]] = {
        "trainset": (run_trainset, add_trainset_parser(commands)),
        "fit": (run_fit, add_fit_parser(commands)),
        "head": (run_head, add_head_parser(commands)),
        "privacy": (run_privacy, add_privacy_parser(commands)),
        "finetune": (run_finetune, add_finetune_parser(commands)),
    }
    args = parser.parse_args(argv)
    run, command_parser = handlers[args.command]
    return run(args, command_parser)
