"""The small dog-vocalization CNN, run on the sensor: inputs, network, streaming scorer.

It reads the sensor's calibrated mel band levels (``sensor.features``: 64 bands, dB SPL, one row
per 20 ms, rounded to float16 as wire v1 carried them and as the network was trained). Since wire
v2 (issue 24) the mel rows never leave the device: the sensor runs this network and sends one
dog score per 20 ms step (``dog_s``). Training (``barkwatch-train fit``, :mod:`training`)
computes its inputs with this very module on mel rows made by the sensor's own code, so training
and deployment cannot drift apart. numpy only: no analyzer import (the analyzer re-exports it
from ``analyzer.detect.classifier``).

Level: the training corpus carries no calibration, so the inputs are *relative*: per band, the
rise over its own slowly tracked background (prominence), and per step the spectral shape
(levels minus their mean over bands). Neither depends on the absolute dB SPL value, which makes
the score independent of a device's calibration and of how loud the dog is at the microphone
(audibility is judged later, from the levels). Only near digital silence
(``min_band_level_db``) is gated out. Band levels more than ``LEVEL_RANGE_DB`` under the
loudest band of their one-second frame are raised to that floor first: a file padded with
digital silence, a studio-clean clip or a band-limited recording then looks like a bark over a
quiet background (which training covers), not like the 100 dB-deep holes no microphone makes.

Network: a small convolutional network, convolutions over (band x time) then dilated
convolutions over time, with no padding in time: the score of a step sees ``context_steps``
either side of it. :class:`ConvNet` runs it with numpy alone and streams: every layer keeps the
last rows of its input, so a stream fed one frame at a time gives exactly the scores of the
whole stream at once, ``context_steps`` behind the rows given; a flush at the end of a stream
(or before a gap) scores the held-back rows against copies of the last row, as the stream's
start is scored against copies of its first. Weights, layer layout and the version id live in
one ``.npz`` file (no pickled objects). MODEL_CARD.md beside the bundled model says how it was
trained and how well it does.
"""

from __future__ import annotations

import functools
import json
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensor.errors import SensorError

# The bundled model: trained by barkwatch-train fit, described by MODEL_CARD.md.
DEFAULT_MODEL_PATH = Path(__file__).resolve().parents[1] / "models" / "dog_classifier.npz"

N_MELS = 64
POOL = 2  # adjacent mel bands averaged (in dB) into one input band, unless the model file asks 1
N_BANDS = N_MELS // POOL
INPUT_POOLS = (1, 2)  # a model's input bands: all 64 mel bands, or adjacent pairs averaged
N_CHANNELS = 2  # prominence and spectral shape
INPUT_SCALE_DB = 20.0  # inputs are dB / 20: order one
BACKGROUND_PERCENTILE_ROW = 10  # of 50 rows: the 20th-percentile row of a frame's bands
BACKGROUND_RISE_S = 8.0  # a rising background follows with this time constant (falls at once)
PROMINENCE_MAX_DB = 60.0
LEVEL_RANGE_DB = 60.0  # band levels are floored this far under the frame's loudest band
INPUT_VERSION = 3
LAYER_KINDS = ("conv2d", "conv1d")
DENSE_MAX_CHANNELS = 2  # band convolutions over this few input channels run as dense matrices


class ClassifierError(SensorError):
    """The classifier model file is missing, malformed or does not fit the input."""


def _pool_bands(mel_db: np.ndarray, pool: int = POOL) -> np.ndarray:
    rows = np.asarray(mel_db, dtype=np.float32)
    if rows.ndim != 2 or rows.shape[1] != N_MELS:
        raise ClassifierError(f"mel rows must be (steps x {N_MELS}), got {rows.shape}")
    if pool == 1:
        return rows
    total = rows[:, 0::pool]
    for k in range(1, pool):
        total = total + rows[:, k::pool]
    return total * (1.0 / pool)


class StepInputs:
    """Streaming network inputs: mel rows in order, (steps x bands x 2) out, no delay.

    Bands are the mel bands averaged ``pool`` at a time (``N_MELS // pool`` bands).

    Levels are first floored ``LEVEL_RANGE_DB`` under the frame's loudest band. Channel 0 is
    each band's prominence over a background that falls at once to a frame's 20th-percentile
    level and rises towards it with ``BACKGROUND_RISE_S`` (never counted under the frame's
    floor); channel 1 is the step's spectral shape. Both in units of ``INPUT_SCALE_DB``.
    """

    def __init__(self, hop_s: float = 0.02, pool: int = POOL) -> None:
        if pool not in INPUT_POOLS:
            raise ClassifierError(f"input band pooling must be one of {INPUT_POOLS}, not {pool}")
        self.hop_s = hop_s
        self.pool = pool
        self.reset()

    def reset(self) -> None:
        """Forget the background (start of a stream, or after a gap)."""
        self._background: np.ndarray | None = None

    def _update_background(self, pooled: np.ndarray) -> np.ndarray:
        k = min(pooled.shape[0] - 1, pooled.shape[0] * BACKGROUND_PERCENTILE_ROW // 50)
        floor = np.partition(pooled, k, axis=0)[k]
        if self._background is None:
            self._background = floor
        else:
            rise = 1.0 - math.exp(-pooled.shape[0] * self.hop_s / BACKGROUND_RISE_S)
            bg = self._background
            self._background = np.where(floor < bg, floor, bg + rise * (floor - bg))
        return self._background

    def process(self, mel_db: np.ndarray) -> np.ndarray:
        """Inputs (n, bands, N_CHANNELS) of the given rows (one frame at a time, in order)."""
        pooled = _pool_bands(mel_db, self.pool)
        out = np.empty((pooled.shape[0], pooled.shape[1], N_CHANNELS), dtype=np.float32)
        if pooled.shape[0] == 0:
            return out
        floor = pooled.max() - LEVEL_RANGE_DB
        pooled = np.maximum(pooled, floor)
        background = np.maximum(self._update_background(pooled), floor)
        out[:, :, 0] = np.clip(pooled - background, 0.0, PROMINENCE_MAX_DB)
        out[:, :, 1] = pooled - pooled.mean(axis=1, keepdims=True)
        out *= 1.0 / INPUT_SCALE_DB
        return out


def inputs_of_stream(mel_db: np.ndarray, hop_s: float = 0.02, pool: int = POOL) -> np.ndarray:
    """Inputs of a whole stream, fed one second (50 rows) at a time as frames arrive."""
    steps = StepInputs(hop_s, pool)
    parts = [steps.process(mel_db[i : i + 50]) for i in range(0, mel_db.shape[0], 50)]
    empty = np.zeros((0, N_MELS // pool, N_CHANNELS), np.float32)
    return np.concatenate(parts) if parts else empty


@dataclass(frozen=True)
class Layer:
    """One layer. ``conv2d``: weight (out, in, bands, time), 'same' zero padding over bands,
    none over time, then max-pooling of ``pool`` adjacent bands; ``conv1d``: weight
    (out, in, time) over the flattened (channel-major) band x channel rows. ReLU unless last."""

    kind: str
    weight: np.ndarray
    bias: np.ndarray
    dilation: int = 1
    pool: int = 1

    @property
    def span(self) -> int:
        """Rows of input consumed beyond the one output row: (kernel - 1) * dilation."""
        return (self.weight.shape[-1] - 1) * self.dilation


@dataclass(frozen=True)
class DogModel:
    """A trained network: its layers, version and metadata; its inputs are the mel bands
    averaged ``input_pool`` at a time."""

    version: str
    layers: tuple[Layer, ...]
    metadata: dict[str, object]
    input_pool: int = POOL

    @property
    def input_bands(self) -> int:
        """Bands of the network's input."""
        return N_MELS // self.input_pool

    @property
    def context_steps(self) -> int:
        """Steps of context either side of a scored step."""
        return sum(layer.span for layer in self.layers) // 2

    def save(self, path: str | Path) -> None:
        """Write the model as a plain ``.npz`` (arrays and a JSON string; no pickle)."""
        arrays: dict[str, np.ndarray] = {
            "version": np.array(self.version),
            "input_version": np.array(INPUT_VERSION),
            "input_pool": np.array(self.input_pool),
            "metadata_json": np.array(json.dumps(self.metadata, sort_keys=True)),
            "layers_json": np.array(json.dumps(
                [{"kind": la.kind, "dilation": la.dilation, "pool": la.pool}
                 for la in self.layers])),
        }  # fmt: skip
        for i, layer in enumerate(self.layers):
            arrays[f"w{i}"] = layer.weight.astype(np.float32)
            arrays[f"b{i}"] = layer.bias.astype(np.float32)
        np.savez_compressed(path, **arrays)  # type: ignore[arg-type]


def _check_layers(layers: tuple[Layer, ...], input_bands: int = N_BANDS) -> None:
    """Refuse a layer stack that cannot run on (steps x input_bands x N_CHANNELS) inputs."""
    bands, channels, flat = input_bands, N_CHANNELS, False
    for i, layer in enumerate(layers):
        w = layer.weight
        if layer.kind not in LAYER_KINDS:
            raise ClassifierError(f"layer {i}: unknown kind {layer.kind!r}")
        if layer.kind == "conv2d":
            if flat or w.ndim != 4 or w.shape[1] != channels or w.shape[2] % 2 == 0:
                raise ClassifierError(f"layer {i}: conv2d weight {w.shape} does not fit "
                                      f"{channels} channels of {bands} bands")
            if layer.pool < 1 or bands % layer.pool:
                raise ClassifierError(f"layer {i}: cannot pool {bands} bands by {layer.pool}")
            bands, channels = bands // layer.pool, w.shape[0]
        else:
            if w.ndim != 3 or w.shape[1] != (channels if flat else channels * bands):
                raise ClassifierError(f"layer {i}: conv1d weight {w.shape} does not fit")
            flat, channels = True, w.shape[0]
        if layer.bias.shape != (w.shape[0],) or layer.dilation < 1:
            raise ClassifierError(f"layer {i}: bias {layer.bias.shape} or dilation is wrong")
    if channels != 1 or sum(layer.span for layer in layers) % 2:
        raise ClassifierError("the network must end in one output with symmetric context")


def load_model(path: str | Path) -> DogModel:
    """Read a model written by :meth:`DogModel.save`; refuse anything that does not fit."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if "input_version" not in data or int(data["input_version"]) != INPUT_VERSION:
                raise ClassifierError(
                    f"{path}: not a model for inputs v{INPUT_VERSION} (an older model file?); "
                    "retrain with barkwatch-train fit"
                )
            specs = json.loads(str(data["layers_json"]))
            layers = tuple(
                Layer(str(spec["kind"]), np.asarray(data[f"w{i}"], dtype=np.float32),
                      np.asarray(data[f"b{i}"], dtype=np.float32), int(spec["dilation"]),
                      int(spec["pool"]))
                for i, spec in enumerate(specs)
            )  # fmt: skip
            # Models written before input_pool existed all averaged bands in pairs.
            pool = int(data["input_pool"]) if "input_pool" in data else POOL
            model = DogModel(str(data["version"]), layers, json.loads(str(data["metadata_json"])),
                             pool)  # fmt: skip
    except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        raise ClassifierError(f"cannot load classifier model {path}: {exc}") from exc
    if model.input_pool not in INPUT_POOLS:
        raise ClassifierError(f"{path}: input band pooling {model.input_pool} is not one of "
                              f"{INPUT_POOLS}")  # fmt: skip
    _check_layers(model.layers, model.input_bands)
    return model


@functools.lru_cache(maxsize=8)
def cached_model(path: str = "") -> DogModel:
    """The model at ``path`` (empty: the bundled one), loaded once per process."""
    return load_model(path or DEFAULT_MODEL_PATH)


class ConvNet:
    """Streaming evaluation of a model's layers with numpy.

    ``process(inputs)`` returns the logits of the steps that now have full context: after the
    first call (whose inputs are preceded by ``context_steps`` copies of the first row) one per
    input row, ``context_steps`` behind; ``flush()`` returns the held-back ones.

    Layout: rows are time steps, kept (time, bands * channels) contiguous. A convolution is a
    sum over its time taps of one matrix product each, on contiguous row slices; a band
    convolution first gathers each band's neighbours (im2col over bands only).
    """

    def __init__(self, model: DogModel) -> None:
        self.layers = model.layers
        self.context_steps = model.context_steps
        # Input bands of each layer; a band convolution over few channels runs as one banded
        # dense matrix per tap (its im2col copy would cost more than the extra multiplies).
        self._bands = [model.input_bands]
        for layer in self.layers:
            self._bands.append(self._bands[-1] // layer.pool)
        self._dense = [
            layer.kind == "conv2d" and layer.weight.shape[1] <= DENSE_MAX_CHANNELS
            for layer in self.layers
        ]
        self._taps = [
            self._banded_matrices(i) if self._dense[i] else self._tap_matrices(i)
            for i in range(len(self.layers))
        ]
        self._biases = [
            np.tile(layer.bias, self._bands[i]) if self._dense[i] else layer.bias
            for i, layer in enumerate(self.layers)
        ]
        self.reset()

    def _banded_matrices(self, i: int) -> list[np.ndarray]:
        """Per time tap, the band convolution as a dense (bands * in, bands * out) matrix whose
        columns run (position in the pooling group, pooled band, channel), so that pooling is a
        maximum over ``pool`` contiguous column blocks."""
        layer, w = self.layers[i], self.layers[i].weight
        n_out, n_in, kf, kt = w.shape
        bands, half, pool = self._bands[i], kf // 2, layer.pool
        taps = []
        for j in range(kt):
            dense = np.zeros((bands, n_in, pool, bands // pool, n_out), dtype=np.float32)
            for f in range(bands):
                for u in range(kf):
                    source = f + u - half
                    if 0 <= source < bands:
                        dense[source, :, f % pool, f // pool, :] = w[:, :, u, j].T
            taps.append(dense.reshape(bands * n_in, -1))
        return taps

    def _tap_matrices(self, i: int) -> list[np.ndarray]:
        """Per time tap, the weight as (inputs, outputs) in this class's row layout."""
        layer, w = self.layers[i], self.layers[i].weight
        if layer.kind == "conv2d":  # (out, in, kf, kt) -> per tap (kf * in, out)
            return [np.ascontiguousarray(w[..., j].transpose(2, 1, 0).reshape(-1, w.shape[0]))
                    for j in range(w.shape[-1])]  # fmt: skip
        if i and self.layers[i - 1].kind == "conv2d":
            # torch flattens (channels, bands) channel-major; rows here are band-major.
            channels = self.layers[i - 1].weight.shape[0]
            w = w.reshape(w.shape[0], channels, -1, w.shape[2]).transpose(0, 2, 1, 3)
            w = w.reshape(w.shape[0], -1, w.shape[3])
        return [np.ascontiguousarray(w[..., j].T) for j in range(w.shape[-1])]

    def reset(self) -> None:
        """Forget all context (start of a stream, or after a gap)."""
        self._tails: list[np.ndarray | None] = [None] * len(self.layers)
        self._last: np.ndarray | None = None

    def _layer(self, i: int, x: np.ndarray) -> np.ndarray:
        """One layer on rows ``x`` (time, bands, channels) or (time, features)."""
        layer = self.layers[i]
        n = x.shape[0] - layer.span
        if self._dense[i]:
            rows, stride = x.reshape(x.shape[0], -1), 1
        elif layer.kind == "conv2d":
            bands = x.shape[1]
            half = layer.weight.shape[2] // 2
            padded = np.zeros((x.shape[0], bands + 2 * half, x.shape[2]), dtype=np.float32)
            padded[:, half : half + bands] = x
            # (time * bands, kf * in): each band beside its neighbours (slices: a fast copy)
            shifted = [padded[:, u : u + bands] for u in range(2 * half + 1)]
            rows = np.concatenate(shifted, axis=2).reshape(x.shape[0] * bands, -1)
            stride = bands
        else:
            rows, stride = x, 1
        out: np.ndarray | None = None
        for j, tap in enumerate(self._taps[i]):
            first = j * layer.dilation * stride
            part = rows[first : first + n * stride] @ tap
            out = part if out is None else np.add(out, part, out=out)
        assert out is not None
        out += self._biases[i]
        if i < len(self.layers) - 1:
            np.maximum(out, 0.0, out=out)
        if self._dense[i]:
            width = out.shape[1] // layer.pool
            pooled = out[:, :width]
            for k in range(1, layer.pool):
                pooled = np.maximum(pooled, out[:, k * width : (k + 1) * width])
            bands = x.shape[1] // layer.pool
            follows_conv1d = i + 1 < len(self.layers) and self.layers[i + 1].kind == "conv1d"
            return pooled if follows_conv1d else pooled.reshape(n, bands, -1)
        if layer.kind == "conv2d":
            grouped = out.reshape(n, x.shape[1] // layer.pool, layer.pool, -1)
            out = grouped[:, :, 0]  # max-pooling by slices: far faster than .max(axis=2)
            for k in range(1, layer.pool):
                out = np.maximum(out, grouped[:, :, k])
            if self.layers[i + 1].kind == "conv1d":
                out = out.reshape(n, -1)
        return out

    def process(self, inputs: np.ndarray) -> np.ndarray:
        """Logits of the steps that now have full context (see the class docstring)."""
        if inputs.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        x = np.asarray(inputs, dtype=np.float32)
        if self._last is None:
            x = np.concatenate([np.repeat(x[:1], self.context_steps, axis=0), x])
        self._last = x[-1:]
        for i, layer in enumerate(self.layers):
            tail = self._tails[i]
            if tail is not None:
                x = np.concatenate([tail, x])
            self._tails[i] = x[max(0, x.shape[0] - layer.span) :]
            if x.shape[0] <= layer.span:
                return np.zeros(0, dtype=np.float32)
            x = self._layer(i, x)
        return x[:, 0]

    def flush(self) -> np.ndarray:
        """Logits of the held-back steps, their future padded with the last row; then resets."""
        if self._last is None:
            return np.zeros(0, dtype=np.float32)
        out = self.process(np.repeat(self._last, self.context_steps, axis=0))
        self.reset()
        return out


def logits_of_stream(model: DogModel, inputs: np.ndarray) -> np.ndarray:
    """Logits of every step of a whole stream of inputs at once (start and end padded)."""
    net = ConvNet(model)
    return np.concatenate([net.process(inputs), net.flush()])


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z.astype(np.float64), -30.0, 30.0)))


def _window_max(levels: np.ndarray, width: int) -> np.ndarray:
    """Maximum over every full window of ``width`` values."""
    if levels.size < width:
        return np.zeros(0, dtype=levels.dtype)
    return np.lib.stride_tricks.sliding_window_view(levels, width).max(axis=1)


class CentredMean:
    """Streaming centred moving average of ``width`` (odd) values, ``width // 2`` behind.

    The stream's start is padded with copies of its first value and, at :meth:`flush`, its end
    with copies of its last, so a stream split into any parts gives the averages of the whole.
    """

    def __init__(self, width: int) -> None:
        self.width = max(1, int(width) | 1)
        self.reset()

    @property
    def delay(self) -> int:
        """Values held back: the average of value i comes with value i + delay."""
        return self.width // 2

    def reset(self) -> None:
        """Forget the held values (start of a stream)."""
        self._held: np.ndarray | None = None

    def process(self, values: np.ndarray, final: bool = False) -> np.ndarray:
        """Averages completed by ``values``; ``final`` ends the stream (see :meth:`flush`)."""
        raw = np.asarray(values, dtype=np.float64)
        half = self.delay
        if half == 0:
            return raw
        if self._held is None:
            if raw.size == 0:
                return raw
            self._held = np.repeat(raw[:1], half)
        buffer = np.concatenate([self._held, raw])
        if final:
            buffer = np.concatenate([buffer, np.repeat(buffer[-1:], half)])
        if buffer.size < self.width:
            self._held = buffer
            return np.zeros(0)
        kernel = np.full(self.width, 1.0 / self.width)
        out = np.convolve(buffer, kernel, mode="valid")
        self._held = None if final else buffer[-(2 * half) :]
        return out

    def flush(self) -> np.ndarray:
        """Averages of the held-back values at the end of a stream; then starts afresh."""
        return self.process(np.zeros(0), final=True)


class DogClassifier:
    """Stateful per-device scorer: mel rows in, smoothed dog probabilities out, delayed.

    ``scores(mel_db)`` returns one score per step, for the steps starting ``delay_steps``
    before the first row given (the first call of a stream returns ``delay_steps`` fewer);
    ``flush()`` returns the scores of the held-back steps at the end of a stream.
    Smoothing is a centred moving average of ``smoothing_steps`` (odd) probabilities; a step
    whose loudest band stays under ``min_band_level_db`` over its context scores 0.
    """

    def __init__(
        self, model: DogModel, smoothing_steps: int = 1, min_band_level_db: float = 0.0,
        hop_s: float = 0.02,
    ) -> None:  # fmt: skip
        self.model = model
        self.model_version = model.version
        self.smoothing_steps = max(1, int(smoothing_steps) | 1)
        self.min_band_level_db = min_band_level_db
        self.inputs = StepInputs(hop_s, model.input_pool)
        self.net = ConvNet(model)
        self.smoother = CentredMean(self.smoothing_steps)
        self.context_steps = model.context_steps
        self.delay_steps = self.context_steps + self.smoothing_steps // 2
        self.reset()

    def reset(self) -> None:
        """Forget all context (after a gap in the data)."""
        self.inputs.reset()
        self.net.reset()
        self.smoother.reset()
        self._levels = np.zeros(0, dtype=np.float32)

    def _gate(self, probabilities: np.ndarray, levels: np.ndarray) -> np.ndarray:
        if levels.size == 0 or levels.min() >= self.min_band_level_db:
            return probabilities  # every window's loudest band is loud enough: nothing gated
        loudest = _window_max(levels, 2 * self.context_steps + 1)[: probabilities.size]
        probabilities[loudest < self.min_band_level_db] = 0.0
        return probabilities

    def _smooth(self, raw: np.ndarray, final: bool) -> np.ndarray:
        return self.smoother.process(raw, final=final)

    def scores(self, mel_db: np.ndarray) -> np.ndarray:
        """Scores (0..1) of the steps that now have full context."""
        rows = np.asarray(mel_db, dtype=np.float32)
        levels = rows.max(axis=1)
        if self._levels.size == 0 and levels.size:
            self._levels = np.repeat(levels[:1], self.context_steps)
        all_levels = np.concatenate([self._levels, levels])
        probabilities = _sigmoid(self.net.process(self.inputs.process(rows)))
        gated = self._gate(probabilities, all_levels)
        self._levels = all_levels[-2 * self.context_steps :]
        return self._smooth(gated, final=False)

    def flush(self) -> np.ndarray:
        """Scores of the held-back steps at the end of a stream; then starts afresh."""
        pad = np.repeat(self._levels[-1:], self.context_steps)
        probabilities = _sigmoid(self.net.flush())
        out = self._smooth(self._gate(probabilities, np.concatenate([self._levels, pad])),
                           final=True)  # fmt: skip
        self.reset()
        return out
