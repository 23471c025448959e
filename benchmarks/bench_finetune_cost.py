"""What fine-tuning YAMNet would cost on this machine's CPU: one training step of its network.

    .venv/bin/python benchmarks/bench_finetune_cost.py [--batch 64] [--steps 10] [--threads 2]

YAMNet is MobileNet v1 on 96 x 64 log-mel patches (0.96 s), 521 AudioSet classes (Plakal and
Ellis, tensorflow/models research/audioset/yamnet, yamnet.py: ``_YAMNET_LAYER_DEFS``). The same
layers are built here in PyTorch with random weights, since a step costs the same whatever the
weights are, and timed on random patches: forward, binary cross-entropy over the 521 outputs,
backward and an Adam step, after warm-up steps. Prints wall and CPU seconds per patch for a
training step and for inference, and what one epoch over ``--patches`` patches costs, as JSON.

Issue 24 asks whether fine-tuning the whole network is practical here; the answer in
docs/DETECTOR.md (a GPU) comes from this benchmark. Needs the ``train`` extra (PyTorch).
"""

from __future__ import annotations

import argparse
import json
import time

# (stride, output channels) of YAMNet's 13 depthwise-separable layers, after a 3 x 3
# convolution of stride 2 to 32 channels (yamnet.py, _YAMNET_LAYER_DEFS).
SEPARABLE_LAYERS = ((1, 64), (2, 128), (1, 128), (2, 256), (1, 256), (2, 512), (1, 512),
                    (1, 512), (1, 512), (1, 512), (1, 512), (2, 1024), (1, 1024))  # fmt: skip
PATCH_SHAPE = (96, 64)  # frames x mel bands
N_CLASSES = 521
TRAINING_PATCHES = 31_519  # labelled and unlabelled patches of the dog head's mixed streams


def yamnet_architecture():  # type: ignore[no-untyped-def]
    """YAMNet's layers (batch norm after every convolution, ReLU), random weights."""
    import torch
    from torch import nn

    layers: list[nn.Module] = [nn.Conv2d(1, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                               nn.ReLU()]  # fmt: skip
    channels = 32
    for stride, out in SEPARABLE_LAYERS:
        layers += [
            nn.Conv2d(channels, channels, 3, stride, 1, groups=channels, bias=False),
            nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, out, 1, bias=False), nn.BatchNorm2d(out), nn.ReLU(),
        ]  # fmt: skip
        channels = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, N_CLASSES)]
    return torch.nn.Sequential(*layers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64, help="patches per step (default 64)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch threads (default 2)")
    parser.add_argument("--patches", type=int, default=TRAINING_PATCHES,
                        help="patches in one epoch, for the epoch's cost (default: the dog "
                        "head's mixed streams, %(default)s)")  # fmt: skip
    args = parser.parse_args()
    if min(args.batch, args.steps, args.threads, args.patches) < 1:
        parser.error("--batch, --steps, --threads and --patches must be at least 1")
    try:
        import torch
    except ImportError:
        parser.error("PyTorch is missing: pip install -e '.[train]'")
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    network = yamnet_architecture()
    optimiser = torch.optim.Adam(network.parameters(), 1e-4)
    patches = torch.randn(args.batch, 1, *PATCH_SHAPE)
    targets = torch.rand(args.batch, N_CLASSES)

    def train_step() -> None:
        loss = torch.nn.functional.binary_cross_entropy_with_logits(network(patches), targets)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()

    for _ in range(3):  # warm-up: allocation and thread start
        train_step()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        train_step()
    train_wall = (time.perf_counter() - wall) / (args.steps * args.batch)
    train_cpu = (time.process_time() - cpu) / (args.steps * args.batch)
    network.eval()
    with torch.no_grad():
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            network(patches)
        infer_wall = (time.perf_counter() - wall) / (args.steps * args.batch)
        infer_cpu = (time.process_time() - cpu) / (args.steps * args.batch)
    print(json.dumps({
        "parameters": sum(p.numel() for p in network.parameters()),
        "threads": args.threads, "batch": args.batch,
        "train_ms_per_patch": {"wall": round(train_wall * 1e3, 2),
                               "cpu": round(train_cpu * 1e3, 2)},
        "inference_ms_per_patch": {"wall": round(infer_wall * 1e3, 2),
                                   "cpu": round(infer_cpu * 1e3, 2)},
        "epoch_minutes": {"patches": args.patches,
                          "wall": round(train_wall * args.patches / 60, 1),
                          "cpu": round(train_cpu * args.patches / 60, 1)},
    }, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
