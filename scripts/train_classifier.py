"""Train the dog-vocalization classifier, validate it on held-out recordings, write its card.

    python scripts/train_classifier.py --corpus /work/shared/corpus/train \\
        [--trainset /tmp/trainset.npz] [--out models/dog_classifier.npz] [--seed 1]
        [--extra-corpus DIR --extra-copies N]

One seeded command: builds the training set with scripts/make_training_set.py when
``--trainset`` does not exist yet (about 26 minutes on 2 cores), computes the network's inputs
with ``analyzer.classifier`` (the code the analyzer runs), trains the small convolutional
network with PyTorch on random 5 s crops (per-step logistic loss plus a loss on each crop's
highest score, feature-level band shifts and masks), folds its batch norms and exports it to a
plain ``.npz`` that numpy runs, checks the export against PyTorch, validates on the held-out
groups with the streaming scorer and the event tracker exactly as deployed, and writes
``models/dog_classifier.metrics.json``. ``--teacher MODEL`` (repeatable) adds a loss towards
other models' mean score at every step (distillation). PyTorch is a training-only dependency
(``[train]``).
Seeded (numpy and torch generators); whether two runs give bit-identical weights was not checked.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import make_training_set  # noqa: E402

from analyzer.classifier import (  # noqa: E402
    INPUT_VERSION,
    N_BANDS,
    N_CHANNELS,
    N_MELS,
    POOL,
    ClassifierError,
    DogClassifier,
    DogModel,
    Layer,
    inputs_of_stream,
    load_model,
    logits_of_stream,
)
from analyzer.config import DetectorSettings  # noqa: E402
from analyzer.evaluate import average_precision, event_counts, recall_at_far  # noqa: E402
from analyzer.events import EventTracker  # noqa: E402

log = logging.getLogger("train_classifier")

HOP_S = 0.02
Models = DogModel | tuple[DogModel, ...]  # one model, or several scored as an ensemble
BATCH = 64
SNR_BINS = [(-5.0, 0.0), (0.0, 10.0), (10.0, 20.01), (float("inf"), float("inf"))]


def load_trainset(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]],
                                       dict[str, Any]]:  # fmt: skip
    with np.load(path, allow_pickle=False) as data:
        return (data["mel"], data["labels"], data["offsets"], json.loads(str(data["meta_json"])),
                json.loads(str(data["config_json"])))  # fmt: skip


def stream_scores(model: Models, mel: np.ndarray, settings: DetectorSettings) -> np.ndarray:
    """Scores of every step of a stream, computed as the live pipeline does (1 s at a time).
    Several models score as an ensemble: the mean of their scores."""
    if isinstance(model, tuple):
        return np.mean([stream_scores(one, mel, settings) for one in model], axis=0)
    scorer = DogClassifier(model, max(1, round(settings.smoothing_s / HOP_S)),
                           settings.min_band_level_db)  # fmt: skip
    parts = [scorer.scores(mel[i : i + 50].astype(np.float32)) for i in range(0, len(mel), 50)]
    parts.append(scorer.flush())
    return np.concatenate(parts)


def spans_of_scores(scores: np.ndarray, settings: DetectorSettings) -> list[tuple[float, float]]:
    tracker = EventTracker("val", settings, "val")
    zeros = np.zeros(scores.size)
    events = tracker.feed(0, HOP_S, scores, zeros, zeros) + tracker.flush()
    return [(e.onset_ns / 1e9, e.offset_ns / 1e9) for e in events]


def runs(mask: np.ndarray, merge_gap_s: float = 0.0) -> list[tuple[float, float]]:
    """Spans (s) of consecutive true steps, runs closer than ``merge_gap_s`` joined."""
    padded = np.r_[False, mask, False].astype(int)
    starts = np.flatnonzero(np.diff(padded) == 1)
    ends = np.flatnonzero(np.diff(padded) == -1)
    spans: list[tuple[float, float]] = []
    for s, e in zip(starts * HOP_S, ends * HOP_S, strict=True):
        if spans and s - spans[-1][1] < merge_gap_s:
            spans[-1] = (spans[-1][0], float(e))
        else:
            spans.append((float(s), float(e)))
    return spans


def _overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and a[1] > b[0]


# Network layout: (kind, out channels, kernel over time, dilation, band pooling); conv2d
# kernels are 3 bands x 3 steps. Cost is ~54k multiply-adds per 20 ms step (see the card).
ARCHITECTURE = (
    ("conv2d", 8, 1, 1, 2),
    ("conv2d", 16, 3, 1, 2),
    ("conv2d", 16, 3, 1, 2),
    ("conv1d", 32, 3, 2, 1),
    ("conv1d", 32, 3, 4, 1),
    ("conv1d", 32, 3, 8, 1),
    ("conv1d", 32, 3, 16, 1),
    ("conv1d", 1, 1, 1, 1),
)
EPOCHS = 60
MIL_WEIGHT = 2.0  # weight of the per-crop loss on the crop's highest score (see fit_network)
CROP_STEPS = 256  # scored steps per training crop (5.1 s)
DISTIL_WEIGHT = 1.0  # weight of the loss towards the teachers' scores (--teacher)
BALANCE = 0.0  # streams drawn alike; see balance_weights and --balance
DROPOUT = 0.1  # after each hidden time convolution
EMA_DECAY = 0.0  # no weight averaging; see fit_network and --ema
Architecture = tuple[tuple[str, int, int, int, int], ...]


def widened(band_channels: tuple[int, ...], time_channels: int,
            architecture: Architecture = ARCHITECTURE) -> Architecture:  # fmt: skip
    """``architecture`` with other channel counts: ``band_channels`` for its band
    convolutions in order, ``time_channels`` for every time convolution but the last (one
    output, the logit). Kernels, dilations, pooling and so the context stay as they are."""
    band = [i for i, layer in enumerate(architecture) if layer[0] == "conv2d"]
    if len(band_channels) != len(band):
        raise ValueError(f"{len(band)} band-convolution channel counts are needed, "
                         f"not {len(band_channels)}")  # fmt: skip
    if min((*band_channels, time_channels)) < 1:
        raise ValueError("channel counts must be at least 1")
    widths = dict(zip(band, band_channels, strict=True))
    last = len(architecture) - 1
    return tuple(
        (kind, widths.get(i, time_channels if i < last else out), kernel, dilation, pool)
        for i, (kind, out, kernel, dilation, pool) in enumerate(architecture)
    )


def for_input_bands(input_bands: int, architecture: Architecture = ARCHITECTURE
                    ) -> Architecture:  # fmt: skip
    """``architecture`` for inputs of ``input_bands`` bands (N_BANDS or all N_MELS): the first
    band convolution pools that many times more, so every later layer, and so nearly all the
    cost, stays as it is."""
    if input_bands not in (N_BANDS, N_MELS):
        raise ValueError(f"input bands must be {N_BANDS} or {N_MELS}, not {input_bands}")
    (kind, out, kernel, dilation, pool), *rest = architecture
    return ((kind, out, kernel, dilation, pool * input_bands // N_BANDS), *rest)


def context_steps(architecture: Architecture = ARCHITECTURE) -> int:
    """Steps of context either side of a scored step (no padding in time)."""
    return sum((kernel - 1) * dilation for _, _, kernel, dilation, _ in architecture) // 2


def build_network(architecture: Architecture = ARCHITECTURE, dropout: float = DROPOUT,
                  input_bands: int = N_BANDS) -> Any:  # fmt: skip
    """The torch twin of :class:`analyzer.classifier.ConvNet` (batch norm folded at export)."""
    import torch
    from torch import nn

    blocks: list[nn.Module] = []
    channels, bands = N_CHANNELS, input_bands
    flat = False
    for i, (kind, out, kernel, dilation, pool) in enumerate(architecture):
        last = i == len(architecture) - 1
        if kind == "conv2d":
            blocks += [
                nn.Conv2d(channels, out, (3, kernel), padding=(1, 0), dilation=(1, dilation)),
                nn.BatchNorm2d(out),
                nn.ReLU(),
                nn.MaxPool2d((pool, 1)),
            ]
            bands //= pool
        else:
            if not flat:
                blocks.append(nn.Flatten(1, 2))  # (batch, channels * bands, time), channel-major
                channels, flat = channels * bands, True
            blocks.append(nn.Conv1d(channels, out, kernel, dilation=dilation))
            if not last:
                blocks += [nn.BatchNorm1d(out), nn.ReLU(), nn.Dropout(dropout)]
        channels = out
    torch.manual_seed(0)
    return nn.Sequential(*blocks)


def export_network(net: Any, metadata: dict[str, Any], input_pool: int = POOL) -> DogModel:
    """Fold each batch norm into the convolution before it and write numpy layers."""
    from torch import nn

    layers: list[Layer] = []
    modules = list(net)
    for i, module in enumerate(modules):
        if not isinstance(module, (nn.Conv2d, nn.Conv1d)):
            continue
        weight = module.weight.detach().double().numpy()
        bias = module.bias.detach().double().numpy()
        after = modules[i + 1] if i + 1 < len(modules) else None
        if isinstance(after, (nn.BatchNorm2d, nn.BatchNorm1d)):
            scale = (
                (after.weight / (after.running_var + after.eps).sqrt()).detach().double().numpy()
            )
            shift = (
                after.bias.detach().double().numpy()
                - after.running_mean.detach().double().numpy() * scale
            )
            weight = weight * scale.reshape(-1, *([1] * (weight.ndim - 1)))
            bias = bias * scale + shift
        pool = 1
        if isinstance(module, nn.Conv2d):
            pools = [m for m in modules[i + 1 : i + 4] if isinstance(m, nn.MaxPool2d)]
            pool = int(pools[0].kernel_size[0]) if pools else 1
        dilation = int(module.dilation[-1])
        layers.append(
            Layer(
                "conv2d" if isinstance(module, nn.Conv2d) else "conv1d",
                weight.astype(np.float32),
                bias.astype(np.float32),
                dilation,
                pool,
            )
        )
    digest = hashlib.sha256(
        b"".join(la.weight.tobytes() + la.bias.tobytes() for la in layers)
    ).hexdigest()[:8]
    version = f"dog-cnn-{INPUT_VERSION}.0-{digest}"
    return DogModel(version, tuple(layers), {**metadata, "version": version}, input_pool)


def stream_inputs(mel: np.ndarray, offsets: np.ndarray, context: int, pool: int = POOL
                  ) -> list[np.ndarray]:  # fmt: skip
    """Network inputs of every stream (as the live scorer computes them), padded at both ends
    with ``context`` copies of the first and last row as the streaming scorer pads them."""
    out = []
    for i in range(len(offsets) - 1):
        x = inputs_of_stream(mel[offsets[i] : offsets[i + 1]].astype(np.float32), pool=pool)
        out.append(
            np.concatenate([np.repeat(x[:1], context, 0), x, np.repeat(x[-1:], context, 0)]).astype(
                np.float16
            )
        )
    return out


def _crop(
    rng: np.random.Generator, x: np.ndarray, lab: np.ndarray, context: int,
    soft: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """A random crop of CROP_STEPS scored steps (with context), its labels and its teacher
    targets (NaN without teachers); short streams are padded with their last row, the padded
    steps ignored (label -1, target NaN). Dog streams are cropped around their dog steps."""
    n = lab.size
    if soft is None:
        soft = np.full(n, np.nan, np.float32)
    if n > CROP_STEPS:
        dog = np.flatnonzero(lab == 1)
        if dog.size and rng.random() < 0.8:
            centre = int(rng.choice(dog))
            start = int(np.clip(centre - rng.integers(0, CROP_STEPS), 0, n - CROP_STEPS))
        else:
            start = int(rng.integers(0, n - CROP_STEPS + 1))
        stop = start + CROP_STEPS
        return x[start : stop + 2 * context], lab[start:stop], soft[start:stop]
    pad = CROP_STEPS - n
    xs = np.concatenate([x, np.repeat(x[-1:], pad, 0)])
    return (xs, np.concatenate([lab, np.full(pad, -1, np.int8)]),
            np.concatenate([soft, np.full(pad, np.nan, np.float32)]))  # fmt: skip


def teacher_targets(teachers: list[DogModel], inputs: list[np.ndarray], context: int
                    ) -> list[np.ndarray]:  # fmt: skip
    """Mean dog probability of the teacher models at every step of every stream (``inputs``
    padded with ``context`` rows either side, as :func:`stream_inputs` gives them)."""
    targets = []
    for x in inputs:
        core = x[context:-context].astype(np.float32)
        logits = np.stack([logits_of_stream(t, core) for t in teachers])
        targets.append(np.mean(1.0 / (1.0 + np.exp(-logits)), axis=0).astype(np.float32))
    return targets


def _augment(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """Feature-level augmentation: a shift of one band pair (pitch), band and time masks
    (in band pairs: with all 64 mel bands as inputs, shifts and masks are twice as many bands)."""
    x = x.astype(np.float32)
    scale = x.shape[1] // N_BANDS
    shift = int(rng.integers(-1, 2)) * scale
    if shift > 0:
        x = np.roll(x, shift, axis=1)
        x[:, :shift] = x[:, shift : shift + 1]
    elif shift < 0:
        x = np.roll(x, shift, axis=1)
        x[:, shift:] = x[:, shift - 1 : shift]
    if rng.random() < 0.5:
        f0, width = int(rng.integers(0, N_BANDS)) * scale, int(rng.integers(1, 5)) * scale
        x[:, f0 : f0 + width] = 0.0
    if rng.random() < 0.5:
        t0, width = int(rng.integers(0, x.shape[0])), int(rng.integers(2, 12))
        x[t0 : t0 + width] = 0.0
    return x


def training_subset(meta: list[dict[str, Any]], fraction: float, seed: int) -> list[int]:
    """The training streams kept when training on ``fraction`` of the training recordings, for
    a learning curve: a clip's streams by whole recordings (``group``), background-only and
    synthetic streams one by one, drawn by a seeded hash independent of the validation split.
    The backgrounds mixed under the clips stay those of the whole training set."""
    keys = [m["group"] if m["kind"] == "clip" else f"stream {i}" for i, m in enumerate(meta)]
    return [
        i for i, key in enumerate(keys)
        if make_training_set.unit_hash(f"subset:{seed}:{key}") < fraction
    ]  # fmt: skip


def balance_weights(names: list[str], power: float) -> np.ndarray:
    """Sampling weight of each stream: its label's stream count to the power ``-power``
    (0: every stream alike; 0.5: a label's share of draws grows as the root of its count)."""
    counts = collections.Counter(names)
    return np.array([counts[n] ** -power for n in names], dtype=np.float64)


def batch_streams(
    rng: np.random.Generator,
    dog: tuple[list[int], np.ndarray | None],
    other: tuple[list[int], np.ndarray | None],
) -> np.ndarray:
    """One batch's streams: half drawn from the dog streams, half from the others, each
    uniformly or with the probabilities given beside them."""
    return np.concatenate(
        [
            rng.choice(dog[0], BATCH // 2, p=dog[1]),
            rng.choice(other[0], BATCH - BATCH // 2, p=other[1]),
        ]
    )


def fit_network(
    inputs: list[np.ndarray],
    labels: list[np.ndarray],
    seed: int,
    epochs: int,
    val: tuple[list[np.ndarray], list[np.ndarray], list[bool]] | None = None,
    mil_weight: float = MIL_WEIGHT,
    soft: list[np.ndarray] | None = None,
    distil_weight: float = 0.0,
    weights: np.ndarray | None = None,
    architecture: Architecture = ARCHITECTURE,
    dropout: float = DROPOUT,
    ema_decay: float = EMA_DECAY,
) -> Any:
    """Train the network on random crops (per-step logistic loss, unknown steps ignored).

    Each batch draws half its streams from those with a dog and half from the rest, uniformly
    or, with ``weights`` (one per stream, :func:`balance_weights`), in proportion to them.
    With ``soft`` (teacher probabilities per stream, :func:`teacher_targets`), a logistic loss
    towards them on every step of the crop, unknown steps included, is added with weight
    ``distil_weight``: distillation of an ensemble into this one small network.
    With ``ema_decay`` > 0 the network returned (and validated each epoch) is the exponential
    moving average of the weights and batch-norm statistics after every step, which averages
    out the last epochs' wandering; the draws and the raw training are the same as without."""
    import torch
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = build_network(architecture, dropout, inputs[0].shape[1])
    averaged = (
        AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(ema_decay), use_buffers=True)
        if ema_decay else None
    )  # fmt: skip
    result = net if averaged is None else averaged.module  # the network validated and returned
    context = context_steps(architecture)
    optimiser = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-3)
    steps_per_epoch = max(1, len(inputs) // BATCH)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser, 3e-3, total_steps=epochs * steps_per_epoch
    )
    dog_streams = [i for i, lab in enumerate(labels) if (lab == 1).any()]
    other_streams = [i for i, lab in enumerate(labels) if not (lab == 1).any()]
    p_dog, p_other = (
        (None, None) if weights is None
        else (weights[pool] / weights[pool].sum() for pool in (dog_streams, other_streams))
    )  # fmt: skip
    for epoch in range(epochs):
        net.train()
        started = time.monotonic()
        total = 0.0
        for _ in range(steps_per_epoch):
            chosen = batch_streams(rng, (dog_streams, p_dog), (other_streams, p_other))
            crops = [
                _crop(rng, inputs[i], labels[i], context, None if soft is None else soft[i])
                for i in chosen
            ]
            xb = torch.from_numpy(
                np.stack([_augment(rng, c[0]) for c in crops]).transpose(0, 3, 2, 1).copy()
            )
            yb = torch.from_numpy(np.stack([c[1] for c in crops]).astype(np.float32))
            logits = net(xb)[:, 0]
            known = yb >= 0
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits[known], yb[known])
            # Multiple-instance term: a crop's highest score should say whether it holds a dog.
            # It aims the training at the one loud spike that would raise a false alarm.
            highest = logits.masked_fill(~known, -1e4).max(dim=1).values
            judged = known.any(dim=1)
            target = (yb == 1).any(dim=1).float()
            loss = loss + mil_weight * torch.nn.functional.binary_cross_entropy_with_logits(
                highest[judged], target[judged]
            )
            if distil_weight:
                tb = torch.from_numpy(np.stack([c[2] for c in crops]))
                taught = ~torch.isnan(tb)
                loss = loss + distil_weight * torch.nn.functional.binary_cross_entropy_with_logits(
                    logits[taught], tb[taught]
                )
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            if averaged is not None:
                averaged.update_parameters(net)
            total += float(loss.detach())
        elapsed = time.monotonic() - started
        message = f"epoch {epoch + 1}/{epochs}: loss {total / steps_per_epoch:.4f}, {elapsed:.0f} s"
        # About 60 held-out checks a run (each about 2 s here), however many epochs it has.
        if val is not None and ((epoch + 1) % max(1, epochs // 60) == 0 or epoch + 1 == epochs):
            message += f", held-out clip AUPRC {_clip_auprc(result, *val):.4f}"
        log.info(message)
    result.eval()
    return result


def _clip_auprc(
    net: Any, inputs: list[np.ndarray], labels: list[np.ndarray], is_dog: list[bool]
) -> float:
    import torch

    net.eval()
    scores = []
    with torch.no_grad():
        for x in inputs:
            z = net(torch.from_numpy(x.astype(np.float32).transpose(2, 1, 0)[None].copy()))[
                0, 0
            ].numpy()
            p = 1 / (1 + np.exp(-z))
            scores.append(float(np.convolve(p, np.ones(5) / 5, mode="same").max()))
    net.train()
    return average_precision(np.array(is_dog), np.array(scores))


def recorded_clip_scores(
    model: Models, corpora: list[Path], settings: DetectorSettings, seed: int,
    fraction: float, silences_s: tuple[float, ...] = (0.0,),
) -> tuple[np.ndarray, list[np.ndarray]]:  # fmt: skip
    """Highest score of every held-out clip exactly as recorded (no mixing, no lead-in; the
    clip scaled to -30 dBFS RMS), as ``barkwatch analyze`` would see the file, once per entry
    of ``silences_s`` (seconds of digital zeros before and after it, as clip datasets pad short
    clips); and its label. Each clip is read once."""
    labels: list[bool] = []
    scores: list[list[float]] = [[] for _ in silences_s]
    paddings = [np.zeros(round(s * make_training_set.RATE)) for s in silences_s]
    for clip in make_training_set.read_manifests(corpora[0], corpora[1:]):
        if not make_training_set.is_validation_group(clip.group, seed, fraction):
            continue
        audio = make_training_set.scaled_to_dbfs(make_training_set.load_audio(clip.path), -30.0)
        labels.append(clip.is_dog)
        for zeros, per_padding in zip(paddings, scores, strict=True):
            mel = make_training_set.mel_of_audio(np.concatenate([zeros, audio, zeros]))
            per_padding.append(float(stream_scores(model, mel, settings).max(initial=0.0)))
    return np.array(labels), [np.array(s) for s in scores]


def licence_counts(clips: list[make_training_set.Clip]) -> dict[str, int]:
    """Clips per licence family (the text before the first parenthesis)."""
    counts = collections.Counter(clip.licence.split(" (")[0].strip() or "unknown" for clip in clips)
    return dict(counts.most_common())


def _event_counts_by_bin(
    streams: list[tuple[np.ndarray, np.ndarray, float]], settings: DetectorSettings
) -> dict[tuple[float, float], list[int]]:
    per_bin = {b: [0, 0, 0] for b in SNR_BINS}
    for lab, scores, snr in streams:
        reference = runs(lab == 1, settings.merge_gap_s)
        # An estimate over only "unknown" steps (the dog clip's quieter parts) is not judged.
        unknown = runs(lab == -1)
        estimated = [
            e for e in spans_of_scores(scores, settings)
            if any(_overlaps(e, r) for r in reference) or not any(_overlaps(e, r) for r in unknown)
        ]  # fmt: skip
        counts = event_counts(reference, estimated, 0.25)
        for lo, hi in SNR_BINS:
            if (lo <= snr < hi) or (snr == lo == float("inf")):
                per_bin[(lo, hi)][0] += counts.tp
                per_bin[(lo, hi)][1] += counts.fp
                per_bin[(lo, hi)][2] += counts.fn
    return per_bin


def _prf(tp: int, fp: int, fn: int) -> dict[str, float | int]:
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    return {
        "precision": round(p, 4),
        "recall": round(r, 4),
        "f1": round(2 * p * r / (p + r), 4) if p + r else 0.0,
        "reference_events": tp + fn,
    }


def validate(
    model: Models, mel: np.ndarray, labels: np.ndarray, offsets: np.ndarray,
    meta: list[dict[str, Any]], settings: DetectorSettings, seed: int, corpora: list[Path],
    val_fraction: float,
) -> dict[str, Any]:  # fmt: skip
    """Held-out metrics with the deployed scorer and tracker (see the card for definitions)."""
    val = [i for i, m in enumerate(meta) if m["split"] == "val"]
    clip_labels, clip_scores = [], []
    step_labels, step_scores = [], []
    dog_streams: list[tuple[np.ndarray, np.ndarray, float]] = []
    negatives: list[int] = []
    for i in val:
        m, lab = meta[i], labels[offsets[i] : offsets[i + 1]]
        scores = stream_scores(model, mel[offsets[i] : offsets[i + 1]], settings)
        keep = lab >= 0
        step_labels.append(lab[keep] == 1)
        step_scores.append(scores[keep])
        clip_labels.append(bool(m["is_dog"]))
        clip_scores.append(float(scores.max(initial=0.0)))
        if not m["is_dog"]:
            negatives.append(i)
        elif (lab == 1).any():
            dog_streams.append((lab, scores, float(m["snr_db"])))
    y = np.array(clip_labels)
    s = np.array(clip_scores)
    recall2, threshold2 = recall_at_far(y, s, 0.02)
    # A long non-dog soundscape: every held-out non-dog stream, in a seeded order, back to back.
    order = np.random.default_rng(seed).permutation(negatives)
    soundscape = np.concatenate([mel[offsets[i] : offsets[i + 1]] for i in order])
    fa_scores = stream_scores(model, soundscape, settings)
    hours = soundscape.shape[0] * HOP_S / 3600
    sweep = {}
    for on in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98):
        swept = dataclasses.replace(settings, on_threshold=on, off_threshold=on - 0.2)
        per_bin = _event_counts_by_bin(dog_streams, swept)
        at_least_0db = np.sum([per_bin[b] for b in SNR_BINS[1:]], axis=0)
        sweep[f"on {on:.2f} / off {on - 0.2:.2f}"] = {
            "false_alarms_per_hour": round(len(spans_of_scores(fa_scores, swept)) / hours, 2),
            "event_f1_snr_at_least_0db": _prf(*map(int, at_least_0db))["f1"],
            "event_f1_snr_-5_to_0db": _prf(*per_bin[SNR_BINS[0]])["f1"],
        }
    per_bin = _event_counts_by_bin(dog_streams, settings)
    event_f1 = {}
    for (lo, hi), counts in per_bin.items():
        name = "clean (no background)" if lo == float("inf") else f"SNR {lo:+.0f}..{hi:+.0f} dB"
        event_f1[name] = _prf(*counts)
    false_alarms = len(spans_of_scores(fa_scores, settings))
    recorded_y, (recorded_s, padded_s) = recorded_clip_scores(
        model, corpora, settings, seed, val_fraction, (0.0, 1.0))  # fmt: skip
    recorded_recall2, _ = recall_at_far(recorded_y, recorded_s, 0.02)
    padded_recall2, _ = recall_at_far(recorded_y, padded_s, 0.02)
    return {
        "validation_streams": len(val),
        "validation_dog_streams": int(y.sum()),
        "validation_groups": len({meta[i]["group"] for i in val if meta[i]["kind"] == "clip"}),
        "clip_auprc": round(average_precision(y, s), 4),
        "clip_recall_at_2pct_far": round(recall2, 4),
        "clip_threshold_at_2pct_far": round(threshold2, 4),
        "recorded_clips": int(recorded_y.size),
        "recorded_dog_clips": int(recorded_y.sum()),
        "recorded_clip_auprc": round(average_precision(recorded_y, recorded_s), 4),
        "recorded_clip_recall_at_2pct_far": round(recorded_recall2, 4),
        "silence_padded_clip_auprc": round(average_precision(recorded_y, padded_s), 4),
        "silence_padded_clip_recall_at_2pct_far": round(padded_recall2, 4),
        "step_auprc": round(
            average_precision(np.concatenate(step_labels), np.concatenate(step_scores)), 4
        ),  # fmt: skip
        "step_dog_fraction": round(float(np.mean(np.concatenate(step_labels))), 4),
        "event_based_onset_collar_0.25s": event_f1,
        "non_dog_soundscape_hours": round(hours, 3),
        "non_dog_soundscape_false_alarms": false_alarms,
        "false_alarms_per_hour": round(false_alarms / hours, 2),
        "threshold_sweep": sweep,
    }


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="folder with manifest.csv")
    parser.add_argument("--trainset", type=Path, default=Path("/tmp/barkwatch-trainset.npz"),
                        help="training set (built here if missing)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "models" / "dog_classifier.npz")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--mil-weight", type=float, default=MIL_WEIGHT,
                        help="weight of the loss on each crop's highest score (false alarms)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch threads for training")
    parser.add_argument("--validate", type=Path, nargs="+", metavar="MODEL",
                        help="train nothing: validate this model file on the training set's "
                        "held-out streams and print the metrics (several files: their mean "
                        "score, an ensemble)")  # fmt: skip
    parser.add_argument("--extra-corpus", type=Path, action="append", default=[], metavar="DIR",
                        help="another folder with manifest.csv for the training set (repeatable;"
                        " see make_training_set.py)")  # fmt: skip
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
    args = parser.parse_args(argv)
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("sensor.frames").setLevel(logging.ERROR)
    if args.validate is not None:
        if not args.trainset.exists():
            parser.error(f"--validate needs an existing --trainset ({args.trainset} not found)")
        mel, labels, offsets, meta, config = load_trainset(args.trainset)
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
    distil_weight = args.distil_weight if teachers else 0.0
    import torch

    torch.set_num_threads(args.threads)
    started = time.monotonic()
    if not args.trainset.exists():
        make_training_set.build(args.corpus, args.trainset, seed=args.seed, jobs=args.jobs,
                                extra_corpora=args.extra_corpus,
                                extra_copies=args.extra_copies)  # fmt: skip
    mel, labels, offsets, meta, config = load_trainset(args.trainset)
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
    net = fit_network([inputs[i] for i in train], [stream_labels[i] for i in train], args.seed,
                      args.epochs, ([inputs[i] for i in val], [stream_labels[i] for i in val],
                                    [bool(meta[i]["is_dog"]) for i in val]),
                      args.mil_weight, soft, distil_weight, weights, architecture,
                      args.dropout, args.ema)  # fmt: skip
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
    clips = make_training_set.read_manifests(corpora[0], corpora[1:])
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


if __name__ == "__main__":
    sys.exit(main())
