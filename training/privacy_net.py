"""The learned attack on wire v2: a small network that maps what v2 carries back to mel frames.

The attacker's best effort at turning v2 back into speech (issue 24, item 6): trained on the
corpus's speech, the network reads every field v2 carries, put on the 20 ms step grid (the
envelopes ``laeq_s``/``laf_s`` and the dog score as they are; the per-second third-octave bands
and YAMNet's 1,024-d embeddings and 521 class scores per 0.48 s patch interpolated linearly
between their centres) and predicts v1's 64 mel band levels per 20 ms, which
:func:`training.privacy.rebuild_from_mel` turns into audio (the attack that makes v1
intelligible). Dilated convolutions over time see about 1.2 s either side of a step. PyTorch,
CPU, one thread, a bounded number of steps; seeded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sensor.yamnet_features import PATCH_S
from training.privacy import SECOND, STEP, V2Content, coarsened

log = logging.getLogger(__name__)

FIELDS = ("envelope", "dog", "bands", "yamnet")  # what v2 carries, as the attack groups it
LEVEL_REF_DB = 60.0  # inputs and targets are (dB - ref) / scale: order one
LEVEL_SCALE_DB = 20.0
MEL_REF_DB = 40.0
SCORE_FLOOR = 1e-4  # class scores enter as log(score + floor)
CROP_STEPS = 160  # 3.2 s training crops
WIDTH = 64
DILATIONS = (1, 2, 4, 8, 16, 1)
KERNEL = 5
YAMNET_PROJECTION = 64


@dataclass(frozen=True)
class AttackInputs:
    """Which v2 fields the attack reads, and the envelope as a coarsened wire would carry it
    (``envelope_steps`` 20 ms steps averaged; 1: as v2 carries it now)."""

    fields: tuple[str, ...] = FIELDS
    envelope_steps: int = 1

    def __post_init__(self) -> None:
        unknown = [name for name in self.fields if name not in FIELDS]
        if unknown or not self.fields:
            raise ValueError(f"attack fields {unknown or '(none)'}: choose from {FIELDS}")
        if self.envelope_steps < 1:
            raise ValueError(f"envelope_steps {self.envelope_steps}: must be at least 1")


def _interpolated(values: np.ndarray, centres: np.ndarray, n_steps: int) -> np.ndarray:
    """Rows given at sample positions ``centres``, linearly interpolated to the step centres
    (held constant beyond the first and last)."""
    steps = np.arange(n_steps) * STEP + STEP / 2
    if len(values) == 1:
        return np.repeat(values, n_steps, axis=0)
    index = np.interp(steps, centres, np.arange(len(centres)))
    low = np.floor(index).astype(int)
    high = np.minimum(low + 1, len(values) - 1)
    weight = (index - low)[:, None]
    return np.asarray(values[low] * (1.0 - weight) + values[high] * weight)


def step_features(content: V2Content, inputs: AttackInputs) -> tuple[np.ndarray, np.ndarray]:
    """(steps x n_other, steps x n_yamnet) attack inputs; n_yamnet is 0 without ``yamnet``."""
    n = content.n_steps
    columns: list[np.ndarray] = []
    if "envelope" in inputs.fields:
        for series in (content.laeq_steps_db, content.laf_steps_db):
            columns.append((coarsened(series, inputs.envelope_steps) - LEVEL_REF_DB)[:, None])
    if "dog" in inputs.fields:
        columns.append(content.dog_steps[:, None] * LEVEL_SCALE_DB)
    if "bands" in inputs.fields:
        centres = np.arange(len(content.bands_db)) * SECOND + SECOND / 2
        columns.append(_interpolated(content.bands_db, centres, n) - LEVEL_REF_DB)
    other = np.concatenate(columns, axis=1) / LEVEL_SCALE_DB if columns else np.zeros((n, 0))
    if "yamnet" not in inputs.fields:
        return other.astype(np.float32), np.zeros((n, 0), np.float32)
    if len(content.embeddings) == 0:  # wire v4: YAMNet's outputs stay on the sensor
        width = content.embeddings.shape[1] + content.class_scores.shape[1]
        return other.astype(np.float32), np.zeros((n, width), np.float32)
    centres = (content.patch_starts_s + PATCH_S / 2) * SECOND
    patch = np.concatenate(
        [content.embeddings, np.log(content.class_scores + SCORE_FLOOR) / 5.0], axis=1
    )
    return other.astype(np.float32), _interpolated(patch, centres, n).astype(np.float32)


def mel_target(mel_db: np.ndarray) -> np.ndarray:
    return ((np.asarray(mel_db) - MEL_REF_DB) / LEVEL_SCALE_DB).astype(np.float32)


def mel_of_target(target: np.ndarray) -> np.ndarray:
    return np.asarray(target, dtype=np.float64) * LEVEL_SCALE_DB + MEL_REF_DB


def _make_network(n_other: int, n_yamnet: int, dropout: float) -> Any:
    import torch
    from torch import nn

    class Inverter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.project = nn.Linear(n_yamnet, YAMNET_PROJECTION) if n_yamnet else None
            n_in = n_other + (YAMNET_PROJECTION if n_yamnet else 0)
            self.inp = nn.Conv1d(n_in, WIDTH, 1)
            self.blocks = nn.ModuleList(
                nn.Conv1d(WIDTH, WIDTH, KERNEL, dilation=d, padding=d * (KERNEL // 2))
                for d in DILATIONS
            )
            self.drop = nn.Dropout(dropout)
            self.out = nn.Conv1d(WIDTH, 64, 1)

        def forward(self, other: torch.Tensor, yamnet: torch.Tensor) -> torch.Tensor:
            parts = [other]
            if self.project is not None:
                parts.append(self.project(self.drop(yamnet)))
            x = self.inp(torch.cat(parts, dim=2).transpose(1, 2))
            for block in self.blocks:
                x = x + block(self.drop(torch.nn.functional.gelu(x)))
            return self.out(torch.nn.functional.gelu(x)).transpose(1, 2)

    return Inverter()


@dataclass
class TrainedAttack:
    """A trained inverter and the inputs it reads."""

    network: Any
    inputs: AttackInputs

    def predict_mel(self, content: V2Content) -> np.ndarray:
        """Predicted v1 mel levels (steps x 64, dB) from v2's content."""
        import torch

        other, yamnet = step_features(content, self.inputs)
        net = self.network
        net.eval()
        with torch.no_grad():
            out = net(torch.from_numpy(other)[None], torch.from_numpy(yamnet)[None])
        return mel_of_target(out[0].numpy())


def train_attack(
    contents: Sequence[V2Content], mels: Sequence[np.ndarray], inputs: AttackInputs,
    steps: int = 1200, seed: int = 1, batch: int = 8, dropout: float = 0.2,
    learning_rate: float = 2e-3,
) -> TrainedAttack:  # fmt: skip
    """Train the inverter on (v2 content, v1 mel) pairs of the training voices."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    features = [step_features(content, inputs) for content in contents]
    other = np.concatenate([f[0] for f in features])
    yamnet = np.concatenate([f[1] for f in features])
    target = np.concatenate([mel_target(mel) for mel in mels])
    if len(target) < CROP_STEPS:
        raise ValueError(f"{len(target)} training steps: fewer than one {CROP_STEPS}-step crop")
    net = _make_network(other.shape[1], yamnet.shape[1], dropout)
    optimiser = torch.optim.AdamW(net.parameters(), lr=learning_rate, weight_decay=1e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, learning_rate, total_steps=steps)
    other_t, yamnet_t, target_t = map(torch.from_numpy, (other, yamnet, target))
    net.train()
    for step in range(steps):
        starts = rng.integers(0, len(target) - CROP_STEPS, batch)
        index = torch.from_numpy(starts[:, None] + np.arange(CROP_STEPS)[None])
        prediction = net(other_t[index], yamnet_t[index])
        loss = torch.nn.functional.mse_loss(prediction, target_t[index])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
        if step % 500 == 0 or step == steps - 1:
            log.info("attack %s: step %d/%d, loss %.4f", inputs, step, steps, loss.item())
    return TrainedAttack(network=net, inputs=inputs)
