"""Fine-tuning YAMNet's top blocks for dog vocalisations on this CPU, judged on left-out sources
(issue 39, first step: does adapting the network beat untouched YAMNet on sources it never saw?).

Recipe:

- **Examples.** Every clip of the corpora (train/, extra/, dogs/) as recorded, plus
  ``copies`` copies placed as a dog next door is heard: 5-60 m away, with ISO 9613-1 air
  absorption over that distance (10 degC, 70 % RH; ``analyzer.acoustics.absorption_db_per_m``,
  applied per FFT bin), a ground reflection (source 0.5 m, microphone 2 m above grass,
  reflection factor 0.6-0.9, its delay from the path difference), reverberation half the time
  (``training.augment``), mixed into a real background bed at -5..+20 dB SNR (RMS over the
  clip) with the microphone's self-noise (-85..-75 dBFS white). Spherical spreading only
  changes the level, which the SNR draw sets. Other sounds are placed the same way, so being
  mixed says nothing about being a dog. Beds come from background recordings that are never
  used for evaluation (``training.head_data.is_held_out_background``).
- **Cache.** YAMNet's convolutions up to separable block ``train_from`` run once per patch
  (``sensor.yamnet_features.clip_patches``), their output kept as float16.
- **Training.** The blocks from ``train_from`` on and a new dog output (1,024 -> 1, started
  from YAMNet's "Dog" class, so the network starts where YAMNet is) are trained with a
  multiple-instance loss: an example's logit is the largest of its patches' (a dog clip need
  only hold a dog somewhere; a clip of something else must hold none), binary cross-entropy,
  the two classes weighted equally, Adam.
- **Judged leaving sources out.** Sources (``corpus/source``) go to ``folds`` folds by a stable
  hash; each fold's network is trained without the fold's sources and their clips' copies,
  then scores them: as recorded, and placed 30 m away in held-out beds at 0 and +10 dB. Clip
  score: the largest patch score. Untouched YAMNet (the largest of its dog classes' scores)
  is scored on the same patches.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from analyzer.acoustics.propagation import absorption_db_per_m
from sensor.yamnet_features import clip_patches
from sensor.yamnet_network import load_class_names
from training.augment import _reverb
from training.corpus import RATE, load_audio, unit_hash
from training.head_data import CorpusClip, is_background, is_held_out_background
from training.head_eval import clip_figures
from training.yamnet_torch import YamnetTorch, block_start

log = logging.getLogger(__name__)

DISTANCE_M = (5.0, 60.0)
SNR_DB = (-5.0, 20.0)
SOURCE_HEIGHT_M, MICROPHONE_HEIGHT_M = 0.5, 2.0
SPEED_OF_SOUND_M_S = 343.0
SELF_NOISE_DBFS = (-85.0, -75.0)
EVAL_DISTANCE_M = 30.0
EVAL_SNRS_DB = (0.0, 10.0)
MAX_CLIP_S = 10.0
MAX_PATCHES_PER_BATCH = 512


@dataclass(frozen=True)
class Recipe:
    """What one fine-tuning run does (printed with its figures)."""

    copies: int = 2
    train_from: int = 12  # first trained separable block (1-13)
    epochs: int = 3
    batch_examples: int = 32
    learning_rate: float = 1e-4
    head_learning_rate: float = 1e-3
    folds: int = 5
    seed: int = 1
    threads: int = 2


def rms(x: np.ndarray) -> float:
    """Root mean square (0 for an empty array)."""
    return float(np.sqrt(np.mean(np.square(x)))) if x.size else 0.0


def at_distance(x: np.ndarray, distance_m: float, ground_factor: float,
                reverberation: np.random.Generator | None = None) -> np.ndarray:
    """``x`` as heard ``distance_m`` away over the ground: air absorption per FFT bin (ISO
    9613-1, 10 degC, 70 % RH), the ground's reflection (factor ``ground_factor``, its
    spreading and delay from the image source's longer path), and reverberation drawn from
    ``reverberation`` when given. Level is left to the caller (spreading is a gain)."""
    n = x.size
    size = 1 << max(10, int(math.ceil(math.log2(n + RATE // 10))))
    frequencies = np.fft.rfftfreq(size, 1.0 / RATE)
    absorption = 10 ** (-absorption_db_per_m(frequencies, 10.0, 70.0) * distance_m / 20)
    direct = math.hypot(distance_m, MICROPHONE_HEIGHT_M - SOURCE_HEIGHT_M)
    reflected = math.hypot(distance_m, MICROPHONE_HEIGHT_M + SOURCE_HEIGHT_M)
    delay_s = (reflected - direct) / SPEED_OF_SOUND_M_S
    ground = ground_factor * direct / reflected
    transfer = absorption * (1 + ground * np.exp(-2j * np.pi * frequencies * delay_s))
    y = np.fft.irfft(np.fft.rfft(x, size) * transfer, size)[:n]
    if reverberation is not None:
        y = _reverb(reverberation, y)[:n]
    return np.asarray(y)


def placed(rng: np.random.Generator, x: np.ndarray, bed: np.ndarray, snr_db: float,
           distance_m: float) -> np.ndarray:
    """``x`` at ``distance_m`` in ``bed`` (as long as ``x``) at ``snr_db``, with self-noise;
    scaled to a bed of -35 dBFS RMS."""
    y = at_distance(x, distance_m, rng.uniform(0.6, 0.9), rng if rng.random() < 0.5 else None)
    bed = bed[: y.size] / max(rms(bed), 1e-9) * 10 ** (-35 / 20)
    y = y / max(rms(y), 1e-9) * rms(bed) * 10 ** (snr_db / 20)
    noise = rng.standard_normal(y.size) * 10 ** (rng.uniform(*SELF_NOISE_DBFS) / 20)
    return np.asarray(y + bed + noise)


def bed_piece(rng: np.random.Generator, beds: list[np.ndarray], n: int) -> np.ndarray:
    """``n`` samples of a random bed (looped when shorter)."""
    bed = beds[int(rng.integers(len(beds)))]
    if bed.size < n:
        bed = np.tile(bed, n // bed.size + 1)
    start = int(rng.integers(0, bed.size - n + 1))
    return bed[start:start + n]


@dataclass
class Examples:
    """Cached activations of every example's patches and what each example is."""

    activations: np.ndarray  # patches x C x H x W, float16
    example_of_patch: np.ndarray  # patch -> example index
    labels: np.ndarray  # per example: dog or not
    clip_of: np.ndarray  # per example: index of its clip
    kind: list[str]  # per example: "train-copy", "clean", "eval-0dB", ...


def build_examples(clips: list[CorpusClip], recipe: Recipe, model: YamnetTorch,
                   progress: Callable[[int, int], None] | None = None) -> Examples:
    """Every clip as recorded, ``recipe.copies`` training copies and the evaluation copies,
    through the frozen bottom of ``model``."""
    rng = np.random.default_rng(recipe.seed)
    beds_train = [load_audio(c.clip.path) for c in clips
                  if is_background(c) and not is_held_out_background(c)]
    beds_eval = [load_audio(c.clip.path) for c in clips if is_held_out_background(c)]
    stop = block_start(recipe.train_from)
    chunks: list[np.ndarray] = []
    example_of_patch: list[np.ndarray] = []
    labels: list[bool] = []
    clip_of: list[int] = []
    kind: list[str] = []

    def add(audio: np.ndarray, clip_index: int, what: str) -> None:
        patches = clip_patches(audio.astype(np.float32)).astype(np.float32)
        with torch.no_grad():
            out = model.features(torch.from_numpy(patches)[:, None], stop)
        chunks.append(out.numpy().astype(np.float16))
        example_of_patch.append(np.full(len(patches), len(labels), dtype=np.int32))
        labels.append(clips[clip_index].clip.is_dog)
        clip_of.append(clip_index)
        kind.append(what)

    for index, item in enumerate(clips):
        audio = load_audio(item.clip.path)[: int(MAX_CLIP_S * RATE)]
        add(audio, index, "clean")
        for _ in range(recipe.copies):
            distance = rng.uniform(*DISTANCE_M)
            snr = rng.uniform(*SNR_DB)
            add(placed(rng, audio, bed_piece(rng, beds_train, audio.size), snr, distance),
                index, "train-copy")
        eval_rng = np.random.default_rng([recipe.seed, index])  # the same for every recipe
        for snr in EVAL_SNRS_DB:
            add(placed(eval_rng, audio, bed_piece(eval_rng, beds_eval, audio.size), snr,
                       EVAL_DISTANCE_M), index, f"eval-{snr:+.0f}dB")
        if progress is not None:
            progress(index + 1, len(clips))
    return Examples(np.concatenate(chunks), np.concatenate(example_of_patch),
                    np.array(labels), np.array(clip_of), kind)


class DogTop(torch.nn.Module):
    """YAMNet's blocks from ``start`` on and one dog logit (started from YAMNet's "Dog")."""

    def __init__(self, base: YamnetTorch, start: int, dog_class: int) -> None:
        super().__init__()
        self.convs = copy.deepcopy(base.convs[start:])
        self.dog = torch.nn.Linear(base.classifier.in_features, 1)
        with torch.no_grad():
            self.dog.weight.copy_(base.classifier.weight[dog_class:dog_class + 1])
            self.dog.bias.copy_(base.classifier.bias[dog_class:dog_class + 1])

    def forward(self, activations: torch.Tensor) -> torch.Tensor:
        x = activations
        for conv in self.convs:
            x = conv(x)
        return self.dog(x.mean(dim=(2, 3)))[:, 0]


def example_logits(patch_logits: torch.Tensor, example_index: torch.Tensor,
                   n_examples: int) -> torch.Tensor:
    """Each example's logit: the largest of its patches' (multiple-instance pooling)."""
    out = torch.full((n_examples,), -torch.inf, dtype=patch_logits.dtype)
    return out.scatter_reduce(0, example_index, patch_logits, reduce="amax", include_self=True)


def _patch_ranges(examples: Examples) -> np.ndarray:
    """Per example, its first patch and one past its last (patches are stored in order)."""
    counts = np.bincount(examples.example_of_patch, minlength=len(examples.labels))
    ends = np.cumsum(counts)
    return np.stack([ends - counts, ends], axis=1)


def train_top(base: YamnetTorch, examples: Examples, train: np.ndarray, recipe: Recipe,
              dog_class: int, progress: Callable[[str], None] | None = None) -> DogTop:
    """Fine-tune a :class:`DogTop` on the examples ``train`` (indices)."""
    torch.manual_seed(recipe.seed)
    rng = np.random.default_rng(recipe.seed)
    top = DogTop(base, block_start(recipe.train_from), dog_class)
    optimiser = torch.optim.Adam([
        {"params": top.convs.parameters(), "lr": recipe.learning_rate},
        {"params": top.dog.parameters(), "lr": recipe.head_learning_rate}])
    ranges = _patch_ranges(examples)
    labels = examples.labels[train]
    weight_dog = 0.5 / max(labels.mean(), 1e-9)
    weight_other = 0.5 / max(1 - labels.mean(), 1e-9)
    for epoch in range(recipe.epochs):
        order = rng.permutation(train)
        losses = []
        for start in range(0, order.size, recipe.batch_examples):
            batch = order[start:start + recipe.batch_examples]
            pieces = [np.arange(*ranges[e]) for e in batch]
            lengths = np.array([p.size for p in pieces])
            patches = np.concatenate(pieces)[:MAX_PATCHES_PER_BATCH]
            owner = np.repeat(np.arange(batch.size), lengths)[:MAX_PATCHES_PER_BATCH]
            x = torch.from_numpy(examples.activations[patches].astype(np.float32))
            logits = example_logits(top(x), torch.from_numpy(owner).long(), batch.size)
            kept = torch.isfinite(logits)  # an example cut off by the batch bound
            target = torch.from_numpy(examples.labels[batch].astype(np.float32))
            weights = torch.where(target > 0, weight_dog, weight_other)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits[kept], target[kept], weights[kept])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(float(loss))
        if progress is not None:
            progress(f"epoch {epoch + 1}/{recipe.epochs}: loss {np.mean(losses):.4f}")
    return top.eval()


def example_scores(examples: Examples, chosen: np.ndarray,
                   score: Callable[[torch.Tensor], torch.Tensor]) -> np.ndarray:
    """The largest patch score of each chosen example."""
    ranges = _patch_ranges(examples)
    out = np.empty(chosen.size)
    with torch.no_grad():
        for i, e in enumerate(chosen):
            a, b = ranges[e]
            x = torch.from_numpy(examples.activations[a:b].astype(np.float32))
            out[i] = float(score(x).max())
    return out


def yamnet_dog_score(base: YamnetTorch, start: int, dog_indices: np.ndarray
                     ) -> Callable[[torch.Tensor], torch.Tensor]:
    """Untouched YAMNet's dog score per patch: the largest of its dog classes' sigmoids."""
    def score(x: torch.Tensor) -> torch.Tensor:
        logits, _ = base.top(x, start)
        return torch.sigmoid(logits[:, dog_indices]).max(dim=1).values
    return score


def _sigmoid_of(top: DogTop) -> Callable[[torch.Tensor], torch.Tensor]:
    def score(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(top(x))
    return score


def fold_of_source(source_key: str, folds: int, seed: int) -> int:
    """A source's fold: stable over runs and machines."""
    return int(unit_hash(f"finetune-fold:{seed}:{source_key}") * folds)


def evaluate(clips: list[CorpusClip], recipe: Recipe,
             say: Callable[[str], None] = log.info) -> dict[str, Any]:
    """Train one network per fold without the fold's sources; score the fold's clips with it
    and with untouched YAMNet. Returns the figures per kind of example."""
    torch.set_num_threads(recipe.threads)
    base = YamnetTorch().eval()
    names = load_class_names()
    from sensor.yamnet_network import DOG_CLASSES
    dog_indices = np.array([names.index(n) for n in DOG_CLASSES])
    started = time.monotonic()

    def built(done: int, total: int) -> None:
        if done % 200 == 0 or done == total:
            say(f"examples: {done}/{total} clips ({time.monotonic() - started:.0f} s)")

    examples = build_examples(clips, recipe, base, built)
    say(f"cached {examples.activations.shape[0]} patches of {len(examples.labels)} examples "
        f"({examples.activations.nbytes / 2**20:.0f} MiB) in {time.monotonic() - started:.0f} s")
    fold_of_clip = np.array([fold_of_source(c.source_key, recipe.folds, recipe.seed)
                             for c in clips])
    fold = fold_of_clip[examples.clip_of]
    kinds = np.array(examples.kind)
    start = block_start(recipe.train_from)
    yamnet = yamnet_dog_score(base, start, dog_indices)
    tuned_scores = np.full(len(examples.labels), np.nan)
    yamnet_scores = np.full(len(examples.labels), np.nan)
    for k in range(recipe.folds):
        train = np.flatnonzero((fold != k) & (kinds == "train-copy") | (fold != k)
                               & (kinds == "clean"))
        test = np.flatnonzero((fold == k) & (kinds != "train-copy"))
        prefix = f"fold {k + 1}/{recipe.folds}"
        top = train_top(base, examples, train, recipe, names.index("Dog"),
                        lambda text: say(f"{prefix} {text}"))  # noqa: B023 (called at once)
        tuned_scores[test] = example_scores(examples, test, _sigmoid_of(top))
        yamnet_scores[test] = example_scores(examples, test, yamnet)
        say(f"fold {k + 1}/{recipe.folds} done ({time.monotonic() - started:.0f} s)")
    report: dict[str, Any] = {"recipe": recipe.__dict__, "clips": len(clips),
                              "sources": len({c.source_key for c in clips}),
                              "seconds": round(time.monotonic() - started)}
    for what in ["clean", *(f"eval-{s:+.0f}dB" for s in EVAL_SNRS_DB)]:
        chosen = kinds == what
        labels = examples.labels[chosen]
        report[what] = {"fine-tuned": clip_figures(labels, tuned_scores[chosen]),
                        "yamnet": clip_figures(labels, yamnet_scores[chosen])}
    return report



def add_finetune_parser(commands: Any) -> Any:
    """``barkwatch-train finetune``: the options of :class:`Recipe`, the corpora, --out."""
    import argparse
    from pathlib import Path

    parser: argparse.ArgumentParser = commands.add_parser(
        "finetune", help="fine-tune YAMNet's top blocks for dogs; judge them on left-out "
        "sources against untouched YAMNet",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    recipe = Recipe(**{f: getattr(args, f) for f in Recipe().__dict__})
    clips = read_corpora(args.corpus)[:: args.every]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    text = json.dumps(evaluate(clips, recipe), indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0
