"""The training script's network and its numpy export compute the same thing, and it learns."""

from __future__ import annotations

import sys

import numpy as np
import torch

from analyzer.classifier import N_BANDS, N_CHANNELS, logits_of_stream
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import train_classifier  # noqa: E402


def test_the_exported_numpy_network_equals_the_torch_network() -> None:
    net = train_classifier.build_network()
    generator = torch.Generator().manual_seed(3)
    for module in net.modules():  # batch norms with statistics, so that folding them matters
        if isinstance(module, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            size = module.num_features
            module.running_mean.copy_(torch.rand(size, generator=generator) - 0.5)
            module.running_var.copy_(torch.rand(size, generator=generator) + 0.5)
            module.weight.data.copy_(torch.rand(size, generator=generator) + 0.5)
            module.bias.data.copy_(torch.rand(size, generator=generator) - 0.5)
    net.eval()
    model = train_classifier.export_network(net, {})
    c = model.context_steps
    inputs = np.random.default_rng(4).random((140, N_BANDS, N_CHANNELS)).astype(np.float32)
    padded = np.concatenate([np.repeat(inputs[:1], c, 0), inputs, np.repeat(inputs[-1:], c, 0)])
    with torch.no_grad():
        expected = net(torch.from_numpy(padded.transpose(2, 1, 0)[None].copy()))[0, 0].numpy()
    assert expected.shape == (140,)
    assert np.allclose(logits_of_stream(model, inputs), expected, atol=1e-4)
    assert model.version.startswith("dog-cnn-")


def test_training_learns_a_separable_toy_problem() -> None:
    # "Dog" steps are bursts in bands 8-11; other streams carry bursts in bands 24-27.
    rng = np.random.default_rng(5)
    context = train_classifier.context_steps()
    inputs, labels = [], []
    for k in range(160):
        x = rng.random((300, N_BANDS, N_CHANNELS)).astype(np.float32) * 0.2
        lab = np.zeros(300, np.int8)
        start = int(rng.integers(50, 200))
        bands = slice(8, 12) if k % 2 else slice(24, 28)
        x[start : start + 40, bands, 0] += 1.5
        if k % 2:
            lab[start : start + 40] = 1
        padded = np.concatenate([np.repeat(x[:1], context, 0), x, np.repeat(x[-1:], context, 0)])
        inputs.append(padded.astype(np.float16))
        labels.append(lab)
    net = train_classifier.fit_network(inputs[:120], labels[:120], seed=1, epochs=8)
    model = train_classifier.export_network(net, {})
    dog, other = [], []
    for x, lab in zip(inputs[120:], labels[120:], strict=True):
        logits = logits_of_stream(model, x[context:-context].astype(np.float32))
        (dog if lab.any() else other).append(float(logits.max()))
    assert min(dog) > max(other)


def test_rare_labels_get_more_copies_within_the_limit() -> None:
    import make_training_set as mts

    clips = [mts.Clip(f"bark{i}", "", True, "dog_bark", f"g{i}", 1.0) for i in range(200)]
    clips += [mts.Clip(f"car{i}", "", False, "car_horn", f"c{i}", 1.0) for i in range(70)]
    clips += [mts.Clip("howl", "", True, "dog_howl", "h", 1.0)]
    clips += [mts.Clip(f"bird{i}", "", False, "bird", f"b{i}", 1.0) for i in range(12)]
    tasks = mts.plan_tasks(clips, seed=1, fraction=0.0, dog_copies=8, other_copies=5,
                           extra_negatives=0, val_copies=2, rare_copy_factor=3)  # fmt: skip
    copies: dict[str, int] = {}
    for task in tasks:
        label = clips[task.clip_index].label
        copies[label] = copies.get(label, 0) + 1
    assert copies["dog_bark"] == 200 * 8  # common labels: the base number
    assert copies["car_horn"] == 70 * 5
    assert copies["dog_howl"] == 8 * 3  # one clip: capped at 3x
    assert copies["bird"] == 12 * round(5 * 35 / 12)  # 15 each
