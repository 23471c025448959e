"""Fine-tuning YAMNet's top blocks for dog vocalisations on this CPU, judged on left-out sources:
the examples, the cache of the frozen bottom, the training and the judging that
:mod:`training.finetune_recipe` describes (``barkwatch-train finetune``)."""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from analyzer.acoustics.propagation import absorption_db_per_m
from sensor.yamnet_features import clip_patches
from sensor.yamnet_network import load_class_names
from training.augment import _reverb
from training.corpus import RATE, load_audio, unit_hash
from training.finetune_recipe import SNR_OF, Recipe
from training.head_data import CorpusClip, gain_for_snr, is_background, is_held_out_background
from training.head_eval import clip_figures
from training.trainset import HOP
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
VOICE_OVER_DB = (-3.0, 10.0)  # a voiced training copy: the clip's RMS over its voice's, drawn
VOICE_LEAD_S = 0.5  # the voice starts up to this much before the clip (drawn)
TRAINED_ONLY_KINDS = ("train-copy", "train-voiced", "train-bed")  # made for training, never judged
TRAINING_KINDS = ("clean", *TRAINED_ONLY_KINDS)


def rms(x: np.ndarray) -> float:
    """Root mean square (0 for an empty array)."""
    return float(np.sqrt(np.mean(np.square(x)))) if x.size else 0.0


def voice_gain(clip: np.ndarray, voice: np.ndarray, over_db: float) -> float:
    """The gain that puts ``voice``'s RMS ``over_db`` under ``clip``'s (a voice laid over a
    placed clip, here and in the judge's barks under voices scene)."""
    return rms(clip) / max(rms(voice), 1e-12) * 10 ** (-over_db / 20)


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
           distance_m: float, snr_of: str = "clip", voice: np.ndarray | None = None,
           voice_over_db: float = 0.0) -> np.ndarray:
    """``x`` at ``distance_m`` in ``bed`` (as long as ``x``) at ``snr_db``, with self-noise;
    scaled to a bed of -35 dBFS RMS. ``snr_of`` "clip": the SNR of ``x``'s RMS over the whole
    clip; "bark": of its prominent steps (``training.head_data.gain_for_snr``), as the
    soundscapes place a clip and measure a bark's own SNR. A 0.1 s bark in a 4 s slice stands
    about 15 dB higher over the bed with "clip" than its nominal SNR.

    ``voice``: a voice near the microphone over it, as the judge's barks under voices scene
    lays one (``benchmarks/judge_soundscapes.py --voiced``): it starts up to ``VOICE_LEAD_S``
    before ``x`` (drawn), and ``x``'s RMS as placed stands ``voice_over_db`` over the voice's
    whole RMS; cut or padded with silence to ``x``'s length."""
    y = at_distance(x, distance_m, rng.uniform(0.6, 0.9), rng if rng.random() < 0.5 else None)
    bed = bed[: y.size] / max(rms(bed), 1e-9) * 10 ** (-35 / 20)
    if snr_of not in SNR_OF:
        raise ValueError(f"snr_of must be 'clip' or 'bark', not {snr_of!r}")
    if snr_of == "bark":
        y = y * gain_for_snr(y, bed, np.ones(y.size // HOP + 1, dtype=bool), snr_db)
    else:
        y = y / max(rms(y), 1e-9) * rms(bed) * 10 ** (snr_db / 20)
    noise = rng.standard_normal(y.size) * 10 ** (rng.uniform(*SELF_NOISE_DBFS) / 20)
    if voice is None:
        return np.asarray(y + bed + noise)
    lead = int(rng.uniform(0.0, VOICE_LEAD_S) * RATE)
    said = np.zeros(y.size)
    piece = voice[lead:lead + y.size]
    said[:piece.size] = piece * voice_gain(y, voice, voice_over_db)
    return np.asarray(y + bed + noise + said)


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
    kind: list[str]  # per example: "clean", "train-copy", "train-bed", "eval-+0dB", ...


def build_examples(clips: list[CorpusClip], recipe: Recipe, model: YamnetTorch,
                   progress: Callable[[int, int], None] | None = None,
                   judged: Callable[[int], bool] | None = None) -> Examples:
    """Every clip as recorded, its training copies (``recipe.copies`` of a dog clip,
    ``recipe.other_copies`` of any other; then ``recipe.voiced_copies`` of a dog clip and
    ``recipe.voiced_other_copies`` of any other with a voice over it, the speech of a clip
    ``judged`` does not accept) and the evaluation copies
    (of the clips ``judged`` accepts; all by default), then ``recipe.bed_pieces`` pieces of
    training beds alone, through the frozen bottom of ``model``. A clip's copies are the same
    whichever clips are judged, and with the default recipe the same as before the three later
    fields existed; the voiced copies have draws of their own, so the others do not move."""
    rng = np.random.default_rng(recipe.draw_seed)
    voiced = recipe.voiced_copies or recipe.voiced_other_copies
    voices = [load_audio(c.clip.path)[: int(MAX_CLIP_S * RATE)]
              for i, c in enumerate(clips) if c.clip.label == "speech"
              and judged is not None and not judged(i)] if voiced else []
    if voiced and not voices:
        raise ValueError("voiced copies need speech clips of sources out of the judged fold "
                         "(and a judged fold)")
    beds_train = [load_audio(c.clip.path) for c in clips
                  if is_background(c) and not is_held_out_background(c)]
    beds_eval = [load_audio(c.clip.path) for c in clips if is_held_out_background(c)]
    stop = block_start(recipe.train_from)
    chunks: list[np.ndarray] = []
    example_of_patch: list[np.ndarray] = []
    labels: list[bool] = []
    clip_of: list[int] = []
    kind: list[str] = []

    def add(audio: np.ndarray, clip_index: int, what: str, is_dog: bool | None = None) -> None:
        patches = clip_patches(audio.astype(np.float32)).astype(np.float32)
        with torch.no_grad():
            out = model.features(torch.from_numpy(patches)[:, None], stop)
        chunks.append(out.numpy().astype(np.float16))
        example_of_patch.append(np.full(len(patches), len(labels), dtype=np.int32))
        labels.append(clips[clip_index].clip.is_dog if is_dog is None else is_dog)
        clip_of.append(clip_index)
        kind.append(what)

    for index, item in enumerate(clips):
        audio = load_audio(item.clip.path)[: int(MAX_CLIP_S * RATE)]
        add(audio, index, "clean")
        for _ in range(recipe.copies if item.clip.is_dog else recipe.other_copies):
            distance = rng.uniform(*DISTANCE_M)
            snr = rng.uniform(*SNR_DB)
            add(placed(rng, audio, bed_piece(rng, beds_train, audio.size), snr, distance,
                       recipe.snr_of), index, "train-copy")
        voice_rng = np.random.default_rng([recipe.draw_seed, index, 11])
        for _ in range(recipe.voiced_copies if item.clip.is_dog else recipe.voiced_other_copies):
            voice = voices[int(voice_rng.integers(len(voices)))]
            distance, snr = voice_rng.uniform(*DISTANCE_M), voice_rng.uniform(*SNR_DB)
            add(placed(voice_rng, audio, bed_piece(voice_rng, beds_train, audio.size), snr,
                       distance, recipe.snr_of, voice, voice_rng.uniform(*VOICE_OVER_DB)),
                index, "train-voiced")
        eval_rng = np.random.default_rng([recipe.seed, index])  # the same for every recipe
        for snr in EVAL_SNRS_DB if judged is None or judged(index) else ():
            add(placed(eval_rng, audio, bed_piece(eval_rng, beds_eval, audio.size), snr,
                       EVAL_DISTANCE_M), index, f"eval-{snr:+.0f}dB")
        if progress is not None:
            progress(index + 1, len(clips))
    bed_rng = np.random.default_rng([recipe.draw_seed, 9])
    bed_clips = [i for i, c in enumerate(clips)
                 if is_background(c) and not is_held_out_background(c)]
    for k in range(recipe.bed_pieces if bed_clips else 0):
        index = bed_clips[k % len(bed_clips)]
        n = int(MAX_CLIP_S * RATE)
        bed = bed_piece(bed_rng, [beds_train[k % len(bed_clips)]], n)
        bed = bed / max(rms(bed), 1e-9) * 10 ** (bed_rng.uniform(-45, -25) / 20)
        noise = bed_rng.standard_normal(n) * 10 ** (bed_rng.uniform(*SELF_NOISE_DBFS) / 20)
        add(bed + noise, index, "train-bed", is_dog=False)
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
    torch.manual_seed(recipe.draw_seed)
    rng = np.random.default_rng(recipe.draw_seed)
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
            losses.append(float(loss.detach()))
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
        train = np.flatnonzero((fold != k) & np.isin(kinds, TRAINING_KINDS))
        test = np.flatnonzero((fold == k) & ~np.isin(kinds, TRAINED_ONLY_KINDS))
        prefix = f"fold {k + 1}/{recipe.folds}"
        top = train_top(base, examples, train, recipe, names.index("Dog"),
                        lambda text: say(f"{prefix} {text}"))  # noqa: B023 (called at once)
        tuned_scores[test] = example_scores(examples, test, _sigmoid_of(top))
        yamnet_scores[test] = example_scores(examples, test, yamnet)
        say(f"fold {k + 1}/{recipe.folds} done ({time.monotonic() - started:.0f} s)")
    report: dict[str, Any] = {"recipe": recipe.__dict__, "clips": len(clips),
                              "sources": len({c.source_key for c in clips}),
                              "seconds": round(time.monotonic() - started)}
    return report | _figures(examples, np.ones(len(kinds), bool), tuned_scores, yamnet_scores)


def _figures(examples: Examples, chosen: np.ndarray, tuned: np.ndarray, yamnet: np.ndarray
             ) -> dict[str, Any]:
    """Clip figures of the ``chosen`` examples per kind (as recorded, each evaluation SNR)."""
    kinds = np.array(examples.kind)
    out: dict[str, Any] = {}
    for what in ["clean", *(f"eval-{s:+.0f}dB" for s in EVAL_SNRS_DB)]:
        rows = chosen & (kinds == what)
        labels = examples.labels[rows]
        out[what] = {"fine-tuned": clip_figures(labels, tuned[rows]),
                     "yamnet": clip_figures(labels, yamnet[rows])}
    return out


class SensorNetwork(torch.nn.Module):
    """What the sensor runs (``models/dog_yamnet.onnx``): untouched YAMNet's 521 logits and
    1,024-d embedding (wire v2's ``ys`` and ``emb``) and the fine-tuned dog logit, which
    shares YAMNet's frozen bottom up to convolution ``start``."""

    def __init__(self, base: YamnetTorch, top: DogTop, start: int) -> None:
        super().__init__()
        self.base, self.tuned, self.start = base, top, start

    def forward(self, patches: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        bottom = self.base.features(patches, self.start)
        logits, embedding = self.base.top(bottom, self.start)
        return logits, embedding, self.tuned(bottom)


def export_sensor_network(base: YamnetTorch, top: DogTop, start: int, path: Path) -> None:
    """Write :class:`SensorNetwork` as ONNX (opset 17, any number of patches); the input and
    the first two outputs are named as in ``models/yamnet.onnx``'s conversion."""
    import warnings

    network = SensorNetwork(base.eval(), top.eval(), start).eval()
    example = torch.zeros(2, 1, 96, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        torch.onnx.export(network, (example,), str(path), dynamo=False, opset_version=17,
                          input_names=["patches"],
                          output_names=["logits", "embeddings", "dog_logit"],
                          dynamic_axes={"patches": {0: "n"}, "logits": {0: "n"},
                                        "embeddings": {0: "n"}, "dog_logit": {0: "n"}})


def train_sensor_network(clips: list[CorpusClip], recipe: Recipe, out: Path,
                         held_out_fold: int | None,
                         say: Callable[[str], None] = log.info) -> dict[str, Any]:
    """Train the network the sensor ships on every source but those of fold ``held_out_fold``
    (None: on all), export it to ``out`` and judge it, with untouched YAMNet, on the held-out
    fold's clips. Returns the figures and the held-out sources (what end-to-end judging of
    the shipped network may use: ``barkwatch-train finetune --held-out-sources``)."""
    torch.set_num_threads(recipe.threads)
    base = YamnetTorch().eval()
    names = load_class_names()
    from sensor.yamnet_network import DOG_CLASSES
    dog_indices = np.array([names.index(n) for n in DOG_CLASSES])
    started = time.monotonic()
    fold_of_clip = np.array([fold_of_source(c.source_key, recipe.folds, recipe.seed)
                             for c in clips])
    held_out = fold_of_clip == (-1 if held_out_fold is None else held_out_fold)

    def built(done: int, total: int) -> None:
        if done % 200 == 0 or done == total:
            say(f"examples: {done}/{total} clips ({time.monotonic() - started:.0f} s)")

    examples = build_examples(clips, recipe, base, built, lambda i: bool(held_out[i]))
    kinds = np.array(examples.kind)
    out_of_training = held_out[examples.clip_of]
    train = np.flatnonzero(~out_of_training & np.isin(kinds, TRAINING_KINDS))
    start = block_start(recipe.train_from)
    top = train_top(base, examples, train, recipe, names.index("Dog"), say)
    export_sensor_network(base, top, start, out)
    say(f"exported {out} ({time.monotonic() - started:.0f} s)")
    report: dict[str, Any] = {
        "recipe": recipe.__dict__, "held_out_fold": held_out_fold,
        "training_clips": int((~held_out).sum()),
        "training_sources": len({clips[i].source_key for i in np.flatnonzero(~held_out)}),
        "held_out_sources": sorted({clips[i].source_key for i in np.flatnonzero(held_out)})}
    if held_out.any():
        judged = np.flatnonzero(out_of_training & ~np.isin(kinds, TRAINED_ONLY_KINDS))
        tuned = np.full(len(kinds), np.nan)
        yamnet = np.full(len(kinds), np.nan)
        tuned[judged] = example_scores(examples, judged, _sigmoid_of(top))
        yamnet[judged] = example_scores(examples, judged,
                                        yamnet_dog_score(base, start, dog_indices))
        report |= _figures(examples, out_of_training, tuned, yamnet)
    report["seconds"] = round(time.monotonic() - started)
    return report


