"""Fitting the network: its inputs per stream, random crops with feature-level augmentation,
batches half dog and half not, and the training loop (:func:`fit_network`).

Seeded (numpy and torch generators). PyTorch is imported inside the functions that use it.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from analyzer.detect import N_BANDS, POOL, DogModel, inputs_of_stream, logits_of_stream
from analyzer.offline import average_precision
from training.corpus import unit_hash
from training.network import ARCHITECTURE, DROPOUT, Architecture, build_network, context_steps

log = logging.getLogger(__name__)

BATCH = 64  # streams per training step: half with a dog, half without
EPOCHS = 60
MIL_WEIGHT = 2.0  # weight of the per-crop loss on the crop's highest score (see fit_network)
CROP_STEPS = 256  # scored steps per training crop (5.1 s)
DISTIL_WEIGHT = 1.0  # weight of the loss towards the teachers' scores (--teacher)
BALANCE = 0.0  # streams drawn alike; see balance_weights and --balance
EMA_DECAY = 0.0  # no weight averaging; see fit_network and --ema


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


def teacher_targets(teachers: Sequence[DogModel], inputs: list[np.ndarray], context: int
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
        if unit_hash(f"subset:{seed}:{key}") < fraction
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
    progress: Callable[[float, float], None] | None = None,
) -> Any:
    """Train the network on random crops (per-step logistic loss, unknown steps ignored).

    Each batch draws half its streams from those with a dog and half from the rest, uniformly
    or, with ``weights`` (one per stream, :func:`balance_weights`), in proportion to them.
    With ``soft`` (teacher probabilities per stream, :func:`teacher_targets`), a logistic loss
    towards them on every step of the crop, unknown steps included, is added with weight
    ``distil_weight``: distillation of an ensemble into this one small network.
    With ``ema_decay`` > 0 the network returned (and validated each epoch) is the exponential
    moving average of the weights and batch-norm statistics after every step, which averages
    out the last epochs' wandering; the draws and the raw training are the same as without.
    ``progress`` is told (steps done, steps) after every step."""
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
        for step in range(steps_per_epoch):
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
            if progress is not None:
                progress(epoch * steps_per_epoch + step + 1, epochs * steps_per_epoch)
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
