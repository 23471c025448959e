"""Fitting the dog head: a logistic or small MLP on YAMNet's embedding and class-score log-odds,
taught with mixed streams (quiet barks at -5..+20 dB SNR), and its fusion with the CNN.

The head (``analyzer.detect.head.DogHead``) reads, per 0.96-s patch, the 1,024-d embedding and
the log-odds of the 521 class scores, standardised; it is trained with PyTorch (training only),
per-patch logistic loss, dog and not-dog patches weighted to equal totals, AdamW, seeded.
Patches labelled -1 (too little dog in them to call, ``training.head_data.patch_labels``) are
left out. The fusion is a logistic regression on [logit cnn, logit head] per 20-ms step, fitted
on step labels with head scores that come from heads which never saw the stream's source
(out-of-source scores, :func:`fit_fusion`), so it learns how far to trust a head on new sources.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from analyzer.detect import DogHead
from analyzer.detect.head import logit, step_head_scores
from training.head_data import StreamSet

log = logging.getLogger(__name__)

EPOCHS = 8
BATCH = 512
LEARNING_RATE = 3e-3
WEIGHT_DECAY = 1e-2
DROPOUT = 0.2


@dataclass(frozen=True)
class HeadRecipe:
    """How a head is fitted: hidden width (0 = logistic), class scores as inputs, epochs."""

    hidden: int = 0
    use_class_scores: bool = True
    epochs: int = EPOCHS
    seed: int = 1

    @property
    def name(self) -> str:
        inputs = "emb+ys" if self.use_class_scores else "emb"
        return f"{'logistic' if self.hidden == 0 else f'mlp{self.hidden}'}-{inputs}"


def raw_features(emb: np.ndarray, ys: np.ndarray, use_class_scores: bool) -> np.ndarray:
    """The head's input before standardisation (float32): embedding, then class log-odds."""
    parts = [np.asarray(emb, np.float32)]
    if use_class_scores:
        parts.append(logit(ys).astype(np.float32))
    return np.concatenate(parts, axis=1)


def fit_head(data: StreamSet, patches: np.ndarray, recipe: HeadRecipe, version: str) -> DogHead:
    """A head fitted on the labelled patches among ``patches`` (indices into ``data``)."""
    import torch

    torch.manual_seed(recipe.seed)
    torch.set_num_threads(1)
    labels = data.patch_labels[patches]
    keep = patches[labels >= 0]
    y = (data.patch_labels[keep] == 1).astype(np.float32)
    x = raw_features(data.emb[keep], data.ys[keep], recipe.use_class_scores)
    mean = x.mean(axis=0)
    scale = x.std(axis=0) + 1e-3
    x = (x - mean) / scale
    weights = np.where(y == 1, 0.5 / max(y.mean(), 1e-6), 0.5 / max(1 - y.mean(), 1e-6))
    n_in = x.shape[1]
    if recipe.hidden:
        model = torch.nn.Sequential(
            torch.nn.Dropout(DROPOUT), torch.nn.Linear(n_in, recipe.hidden), torch.nn.ReLU(),
            torch.nn.Dropout(DROPOUT), torch.nn.Linear(recipe.hidden, 1))  # fmt: skip
    else:
        model = torch.nn.Sequential(torch.nn.Dropout(DROPOUT), torch.nn.Linear(n_in, 1))
    optimiser = torch.optim.AdamW(model.parameters(), LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    xt, yt, wt = (
        torch.from_numpy(x),
        torch.from_numpy(y),
        torch.from_numpy(weights.astype(np.float32)),
    )
    generator = torch.Generator().manual_seed(recipe.seed)
    model.train()
    for epoch in range(recipe.epochs):
        order = torch.randperm(len(y), generator=generator)
        total = 0.0
        for start in range(0, len(y), BATCH):
            batch = order[start : start + BATCH]
            out = model(xt[batch])[:, 0]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                out, yt[batch], weight=wt[batch])  # fmt: skip
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += loss.item() * len(batch)
        log.debug("%s epoch %d: loss %.4f", recipe.name, epoch, total / len(y))
    linear = [m for m in model if isinstance(m, torch.nn.Linear)]
    layers = tuple(
        (m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy()) for m in linear
    )
    return DogHead(version=version, layers=layers, feature_mean=mean, feature_scale=scale,
                   use_class_scores=recipe.use_class_scores)  # fmt: skip


def patch_starts_s(n_patches: int) -> np.ndarray:
    """Start times of a stream's patches, s (YAMNet's 0.48-s hop from the stream's start)."""
    return np.arange(n_patches) * 0.48


def head_steps(head: DogHead, data: StreamSet, stream: int) -> np.ndarray:
    """The head's score at every 20-ms step of one stream (:func:`step_head_scores`)."""
    p0, p1 = int(data.patch_offsets[stream]), int(data.patch_offsets[stream + 1])
    n = int(data.step_offsets[stream + 1] - data.step_offsets[stream])
    scores = head.patch_scores(data.emb[p0:p1].astype(np.float32), data.ys[p0:p1])
    return step_head_scores(patch_starts_s(p1 - p0), scores, n)


def fit_fusion(cnn: np.ndarray, head: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Weights [a, b, c] of sigmoid(a logit(cnn) + b logit(head) + c), by Newton's method on
    the logistic loss over the labelled steps (dog and not-dog weighted to equal totals)."""
    keep = labels >= 0
    x = np.column_stack([logit(cnn[keep]), logit(head[keep]), np.ones(int(keep.sum()))])
    y = (labels[keep] == 1).astype(np.float64)
    w = np.where(y == 1, 0.5 / max(y.mean(), 1e-9), 0.5 / max(1 - y.mean(), 1e-9))
    beta = np.zeros(3)
    for _ in range(25):
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        gradient = x.T @ (w * (p - y)) + 1e-3 * beta
        hessian = (x * (w * p * (1 - p))[:, None]).T @ x + 1e-3 * np.eye(3)
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if np.max(np.abs(step)) < 1e-6:
            break
    return beta
