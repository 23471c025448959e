"""YAMNet in PyTorch, with the weights of the bundled ``models/yamnet.onnx``, for fine-tuning.

The ONNX graph (``scripts/convert_yamnet.py``) is MobileNet v1 with its batch norms folded
into the convolutions' biases: 27 convolutions, each followed by a ReLU (a 3 x 3 stride-2
stem, then 13 depthwise-separable blocks of a depthwise and a pointwise convolution), a global
average pool (the 1,024-d embedding) and the 521-class linear classifier. Stride-2
convolutions pad as TensorFlow's "SAME" does: nothing before, one row and column after.

The layers are read from the graph itself, so this module holds no copy of the weights and
cannot drift from the file the sensor runs. :meth:`YamnetTorch.forward` can start and stop
at any layer: the frozen first layers are run once per patch and cached
(:meth:`YamnetTorch.features`), and only the top is trained on the cache
(:meth:`YamnetTorch.top`) — the same numbers as the whole network (tests/test_finetune.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from sensor.yamnet_network import DEFAULT_YAMNET_PATH, EMBEDDING_SIZE, N_CLASSES

# The convolution that opens each of the 13 separable blocks (its depthwise layer), counted
# in :attr:`YamnetTorch.convs`: block b (1-based) starts at conv 2 * b - 1.
BLOCKS = 13


def block_start(block: int) -> int:
    """Index in :attr:`YamnetTorch.convs` of separable block ``block``'s first convolution
    (1-based blocks, as YAMNet's layer table counts them after the stem)."""
    if not 1 <= block <= BLOCKS:
        raise ValueError(f"YAMNet has separable blocks 1-{BLOCKS}, not {block}")
    return 2 * block - 1


@dataclass(frozen=True)
class ConvSpec:
    """One convolution of the graph: its weights and how it is applied."""

    weight: np.ndarray
    bias: np.ndarray
    stride: int
    groups: int
    pads: tuple[int, int, int, int]  # ONNX order: top, left, bottom, right


def read_graph(path: Path = DEFAULT_YAMNET_PATH) -> tuple[list[ConvSpec], np.ndarray, np.ndarray]:
    """The convolutions in order and the classifier's weight (521 x 1,024) and bias."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    convs: list[ConvSpec] = []
    classifier: tuple[np.ndarray, np.ndarray] | None = None
    for node in graph.node:
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv":
            strides = list(attributes.get("strides", [1, 1]))
            pads = tuple(int(p) for p in attributes.get("pads", [0, 0, 0, 0]))
            if strides[0] != strides[1] or len(pads) != 4:
                raise ValueError(f"{path}: unexpected convolution {node.name}: {attributes}")
            convs.append(ConvSpec(weights[node.input[1]], weights[node.input[2]], strides[0],
                                  int(attributes.get("group", 1)),
                                  (pads[0], pads[1], pads[2], pads[3])))
        elif node.op_type == "Gemm":
            if not attributes.get("transB", 0):
                raise ValueError(f"{path}: the classifier's Gemm is expected with transB=1")
            classifier = (weights[node.input[1]], weights[node.input[2]])
        elif node.op_type not in ("Relu", "GlobalAveragePool", "Reshape", "Flatten"):
            raise ValueError(f"{path}: operator {node.op_type} is not part of YAMNet's graph")
    if len(convs) != 1 + 2 * BLOCKS or classifier is None:
        raise ValueError(f"{path}: expected {1 + 2 * BLOCKS} convolutions and a classifier, "
                         f"found {len(convs)}")
    return convs, classifier[0], classifier[1]


class PaddedConv(nn.Module):
    """A convolution with ONNX's explicit (possibly asymmetric) padding, then a ReLU."""

    def __init__(self, spec: ConvSpec) -> None:
        super().__init__()
        out_channels, in_per_group, kh, kw = spec.weight.shape
        self.conv = nn.Conv2d(in_per_group * spec.groups, out_channels, (kh, kw), spec.stride,
                              padding=0, groups=spec.groups, bias=True)
        with torch.no_grad():
            self.conv.weight.copy_(torch.from_numpy(spec.weight.astype(np.float32)))
            assert self.conv.bias is not None
            self.conv.bias.copy_(torch.from_numpy(spec.bias.astype(np.float32)))
        top, left, bottom, right = spec.pads
        self.pad = (left, right, top, bottom)  # torch's order: last dimension first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if any(self.pad):
            x = nn.functional.pad(x, self.pad)
        return torch.relu(self.conv(x))


class YamnetTorch(nn.Module):
    """YAMNet: ``[n, 1, 96, 64]`` log-mel patches -> (521 logits, 1,024-d embedding)."""

    def __init__(self, path: Path = DEFAULT_YAMNET_PATH) -> None:
        super().__init__()
        convs, weight, bias = read_graph(path)
        self.convs = nn.ModuleList(PaddedConv(spec) for spec in convs)
        self.classifier = nn.Linear(EMBEDDING_SIZE, N_CLASSES)
        with torch.no_grad():
            self.classifier.weight.copy_(torch.from_numpy(weight.astype(np.float32)))
            self.classifier.bias.copy_(torch.from_numpy(bias.astype(np.float32)))

    def features(self, patches: torch.Tensor, stop: int) -> torch.Tensor:
        """The activations after the first ``stop`` convolutions (the cache of a frozen
        bottom: ``stop = block_start(b)`` gives the input of separable block ``b``)."""
        x = patches
        for conv in self.convs[:stop]:
            x = conv(x)
        return x

    def top(self, activations: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, embedding) from the activations before convolution ``start``."""
        x = activations
        for conv in self.convs[start:]:
            x = conv(x)
        embedding = x.mean(dim=(2, 3))
        return self.classifier(embedding), embedding

    def forward(self, patches: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.top(patches, 0)
