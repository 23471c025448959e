"""The classifier's network: its layout, the torch twin that training fits, and the export of
the fitted network to the numpy model file the analyzer runs (:mod:`analyzer.detect.classifier`).

PyTorch is imported only inside the functions that build or read a torch network, so the rest
of the package (and the training set's command) runs without it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from analyzer.detect import (
    INPUT_VERSION,
    N_BANDS,
    N_CHANNELS,
    N_MELS,
    POOL,
    DogModel,
    Layer,
)

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
DROPOUT = 0.1  # after each hidden time convolution
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
    """The torch twin of :class:`analyzer.detect.classifier.ConvNet` (batch norm folded at
    export)."""
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


def _folded(conv: Any, norm: Any) -> tuple[np.ndarray, np.ndarray]:
    """The weight and bias of ``conv`` with the batch norm ``norm`` after it (or None) folded
    in. (Any: torch's types leave a convolution's bias and a norm's statistics optional.)"""
    weight = conv.weight.detach().double().numpy()
    bias = conv.bias.detach().double().numpy()
    if norm is not None:
        scale = (norm.weight / (norm.running_var + norm.eps).sqrt()).detach().double().numpy()
        shift = (
            norm.bias.detach().double().numpy()
            - norm.running_mean.detach().double().numpy() * scale
        )
        weight = weight * scale.reshape(-1, *([1] * (weight.ndim - 1)))
        bias = bias * scale + shift
    return weight, bias


def export_network(net: Any, metadata: dict[str, Any], input_pool: int = POOL) -> DogModel:
    """Fold each batch norm into the convolution before it and write numpy layers."""
    from torch import nn

    layers: list[Layer] = []
    modules = list(net)
    for i, module in enumerate(modules):
        if not isinstance(module, (nn.Conv2d, nn.Conv1d)):
            continue
        after = modules[i + 1] if i + 1 < len(modules) else None
        norm = after if isinstance(after, (nn.BatchNorm2d, nn.BatchNorm1d)) else None
        weight, bias = _folded(module, norm)
        pool = 1
        if isinstance(module, nn.Conv2d):
            pools = [m for m in modules[i + 1 : i + 4] if isinstance(m, nn.MaxPool2d)]
            pool = int(np.ravel(pools[0].kernel_size)[0]) if pools else 1  # built as (pool, 1)
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
