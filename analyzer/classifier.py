"""Dog-vocalization classifier over the sensor's mel frames: features, model, streaming scorer.

The analyzer only ever sees calibrated mel band levels (``sensor.features``: 64 bands, dB SPL,
one row per 20 ms, float16 on the wire), so that is all this module reads. Training
(``scripts/train_classifier.py``) computes its inputs with this very module on frames built
by the sensor's own code, so training and deployment cannot drift apart.

Level: the training corpus carries no calibration, so every feature is *relative*: a band's
rise over its own slowly-tracked background (prominence), spectral shape (levels minus their
mean over bands), temporal spread and movement, and the shape of the broadband envelope. No
feature depends on the absolute dB SPL value, which makes the score independent of a device's
calibration and of how loud the dog is at the microphone (audibility is judged later, from the
levels). Only near digital silence (``min_band_level_db``) is gated out.

Context: the score of a 20 ms step looks ``CONTEXT_STEPS`` (0.24 s) either side, so a
streaming scorer returns scores ``delay_steps`` behind the rows it was given, and a flush at
the end of a stream (or before a gap) scores the held-back rows against a repeated last row.

Model: a small multilayer perceptron (ReLU hidden layers, logistic output) evaluated with
numpy; weights, feature standardisation and the version id live in one ``.npz`` file (no
pickled objects). MODEL_CARD.md beside the bundled model says how it was trained and how well
it does.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analyzer.errors import AnalyzerError

# The bundled model: trained by scripts/train_classifier.py, described by MODEL_CARD.md.
DEFAULT_MODEL_PATH = Path(__file__).resolve().parent.parent / "models" / "dog_classifier.npz"

N_MELS = 64
POOL = 2  # adjacent mel bands averaged (in dB) into one feature band
N_BANDS = N_MELS // POOL
CONTEXT_STEPS = 12  # steps of context either side of the scored step (0.24 s at 20 ms)
WINDOW_STEPS = 2 * CONTEXT_STEPS + 1
BACKGROUND_PERCENTILE_ROW = 10  # of 50 rows: the 20th-percentile row of a frame's bands
BACKGROUND_RISE_S = 8.0  # a rising background follows with this time constant (falls at once)
PROMINENCE_MAX_DB = 60.0
FEATURE_VERSION = 1


class ClassifierError(AnalyzerError):
    """The classifier model file is missing, malformed or does not fit the input."""


def _pool_bands(mel_db: np.ndarray) -> np.ndarray:
    rows = np.asarray(mel_db, dtype=np.float32)
    if rows.ndim != 2 or rows.shape[1] != N_MELS:
        raise ClassifierError(f"mel rows must be (steps x {N_MELS}), got {rows.shape}")
    return (rows[:, 0::POOL] + rows[:, 1::POOL]) * (1.0 / POOL)


def _window_sums(x: np.ndarray) -> np.ndarray:
    """Sum over every full window of ``WINDOW_STEPS`` rows (running sums, float64)."""
    c = np.cumsum(np.concatenate([np.zeros((1, x.shape[1])), x]), axis=0, dtype=np.float64)
    return c[WINDOW_STEPS:] - c[:-WINDOW_STEPS]


def _window_max(x: np.ndarray) -> np.ndarray:
    """Maximum over every full window of ``WINDOW_STEPS`` rows (doubling: 1, 2, 4, 8, 16)."""
    m, width = x, 1
    while 2 * width <= WINDOW_STEPS:
        m = np.maximum(m[:-width], m[width:])
        width *= 2
    n = x.shape[0] - WINDOW_STEPS + 1
    return np.maximum(m[:n], m[WINDOW_STEPS - width : WINDOW_STEPS - width + n])


def _window_features(pooled: np.ndarray, prominence: np.ndarray) -> np.ndarray:
    """Features of every full window of ``WINDOW_STEPS`` rows (rows x bands) -> (n, F)."""
    n = pooled.shape[0] - WINDOW_STEPS + 1
    b = N_BANDS
    # One running sum serves the window means of level, squared level, step-to-step movement
    # and prominence (float64: the differences of large sums must stay exact to ~1e-6 dB).
    stacked = np.empty((pooled.shape[0] + 1, 4 * b))
    stacked[0] = 0.0
    stacked[1:, :b] = pooled
    stacked[1:, b : 2 * b] = pooled
    stacked[1:, b : 2 * b] **= 2
    stacked[1, 2 * b : 3 * b] = 0.0
    stacked[2:, 2 * b : 3 * b] = np.abs(pooled[1:] - pooled[:-1])
    stacked[1:, 3 * b :] = prominence
    c = np.cumsum(stacked, axis=0)
    sums = (c[WINDOW_STEPS:] - c[:-WINDOW_STEPS]) * (1.0 / WINDOW_STEPS)
    mean_db = sums[:, :b]
    # The movement sum spans the 24 differences inside the window (its first row holds the
    # difference to the row before the window, which is replaced by the next one's).
    moves = c[WINDOW_STEPS:, 2 * b : 3 * b] - c[1 : n + 1, 2 * b : 3 * b]
    centre = pooled[CONTEXT_STEPS : CONTEXT_STEPS + n]
    out = np.empty((n, N_FEATURES), dtype=np.float32)
    out[:, :b] = centre - centre.mean(axis=1, keepdims=True)
    out[:, b : 2 * b] = mean_db - mean_db.mean(axis=1, keepdims=True)
    out[:, 2 * b : 3 * b] = np.sqrt(np.maximum(sums[:, b : 2 * b] - mean_db**2, 0.0))
    out[:, 3 * b : 4 * b] = moves * (1.0 / (WINDOW_STEPS - 1))
    out[:, 4 * b : 5 * b] = prominence[CONTEXT_STEPS : CONTEXT_STEPS + n]
    out[:, 5 * b : 6 * b] = sums[:, 3 * b :]
    out[:, 6 * b : 7 * b] = _window_max(prominence)
    # Broadband envelope (mean prominence over bands), relative to the window's maximum: the
    # temporal shape (impulsive bark, sustained howl, steady noise) independent of level.
    envelope = np.lib.stride_tricks.sliding_window_view(prominence.mean(axis=1), WINDOW_STEPS)
    env_peak = envelope.max(axis=1)
    out[:, 7 * b : 7 * b + WINDOW_STEPS] = envelope - env_peak[:, None]
    out[:, -2] = env_peak
    out[:, -1] = envelope[:, CONTEXT_STEPS]
    return out


N_FEATURES = 7 * N_BANDS + WINDOW_STEPS + 2


class StepFeatures:
    """Streaming feature extractor: feed mel rows in order, get features ``delay`` behind.

    Keeps the last ``2 * CONTEXT_STEPS`` pooled rows and their prominence, and a per-band
    background that falls at once to a frame's 20th-percentile level and rises towards it with
    ``BACKGROUND_RISE_S``. The first rows of a stream are padded with copies of the first row.
    """

    delay_steps = CONTEXT_STEPS

    def __init__(self, hop_s: float = 0.02) -> None:
        self.hop_s = hop_s
        self.reset()

    def reset(self) -> None:
        """Forget all context (start of a stream, or after a gap)."""
        self._pooled = np.zeros((0, N_BANDS), dtype=np.float32)
        self._prominence = np.zeros((0, N_BANDS), dtype=np.float32)
        self._background: np.ndarray | None = None
        self._started = False

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
        """Features (n, N_FEATURES) of the steps that now have full context."""
        pooled = _pool_bands(mel_db)
        if pooled.shape[0] == 0:
            return np.zeros((0, N_FEATURES), dtype=np.float32)
        background = self._update_background(pooled)
        prominence = np.clip(pooled - background, 0.0, PROMINENCE_MAX_DB)
        if not self._started:
            self._started = True
            self._pooled = np.repeat(pooled[:1], CONTEXT_STEPS, axis=0)
            self._prominence = np.repeat(prominence[:1], CONTEXT_STEPS, axis=0)
        return self._extend(pooled, prominence)

    def flush(self) -> np.ndarray:
        """Features of the held-back last rows, their future padded with the last row."""
        if not self._started or self._pooled.shape[0] == 0:
            return np.zeros((0, N_FEATURES), dtype=np.float32)
        pad = CONTEXT_STEPS
        out = self._extend(
            np.repeat(self._pooled[-1:], pad, axis=0), np.repeat(self._prominence[-1:], pad, axis=0)
        )
        self.reset()
        return out

    def _extend(self, pooled: np.ndarray, prominence: np.ndarray) -> np.ndarray:
        all_pooled = np.concatenate([self._pooled, pooled])
        all_prom = np.concatenate([self._prominence, prominence])
        keep = 2 * CONTEXT_STEPS
        self._pooled, self._prominence = all_pooled[-keep:], all_prom[-keep:]
        if all_pooled.shape[0] < WINDOW_STEPS:
            return np.zeros((0, N_FEATURES), dtype=np.float32)
        return _window_features(all_pooled, all_prom)


def features_of_stream(mel_db: np.ndarray) -> np.ndarray:
    """Features of every row of a whole stream (rows x 64 mel levels) -> (rows, N_FEATURES).

    Fed one second (50 rows) at a time, exactly as frames arrive, then flushed.
    """
    extractor = StepFeatures()
    parts = [extractor.process(mel_db[i : i + 50]) for i in range(0, mel_db.shape[0], 50)]
    parts.append(extractor.flush())
    return np.concatenate(parts) if parts else np.zeros((0, N_FEATURES), dtype=np.float32)


@dataclass(frozen=True)
class DogModel:
    """A trained multilayer perceptron: standardisation, layers, version and metadata."""

    version: str
    feature_mean: np.ndarray
    feature_scale: np.ndarray
    weights: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    metadata: dict[str, object]

    def logits(self, features: np.ndarray) -> np.ndarray:
        """Output logit per row of ``features``."""
        x = (features - self.feature_mean) * self.feature_scale
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = x @ w + b
            if i < last:
                np.maximum(x, 0.0, out=x)
        return x[:, 0]

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """Dog probability (0..1) per row of ``features``."""
        if features.shape[0] == 0:
            return np.zeros(0)
        z = np.clip(self.logits(features.astype(np.float32)), -30.0, 30.0)
        return 1.0 / (1.0 + np.exp(-z.astype(np.float64)))

    def save(self, path: str | Path) -> None:
        """Write the model as a plain ``.npz`` (arrays and a JSON string; no pickle)."""
        arrays: dict[str, np.ndarray] = {
            "version": np.array(self.version),
            "feature_version": np.array(FEATURE_VERSION),
            "feature_mean": self.feature_mean.astype(np.float32),
            "feature_scale": self.feature_scale.astype(np.float32),
            "metadata_json": np.array(json.dumps(self.metadata, sort_keys=True)),
            "n_layers": np.array(len(self.weights)),
        }
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            arrays[f"w{i}"] = w.astype(np.float32)
            arrays[f"b{i}"] = b.astype(np.float32)
        np.savez_compressed(path, **arrays)  # type: ignore[arg-type]


def load_model(path: str | Path) -> DogModel:
    """Read a model written by :meth:`DogModel.save`; refuse anything that does not fit."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if int(data["feature_version"]) != FEATURE_VERSION:
                raise ClassifierError(
                    f"{path}: model uses features v{int(data['feature_version'])}, this code "
                    f"computes v{FEATURE_VERSION}; retrain with scripts/train_classifier.py"
                )
            n_layers = int(data["n_layers"])
            weights = tuple(np.asarray(data[f"w{i}"], dtype=np.float32) for i in range(n_layers))
            biases = tuple(np.asarray(data[f"b{i}"], dtype=np.float32) for i in range(n_layers))
            model = DogModel(
                version=str(data["version"]),
                feature_mean=np.asarray(data["feature_mean"], dtype=np.float32),
                feature_scale=np.asarray(data["feature_scale"], dtype=np.float32),
                weights=weights,
                biases=biases,
                metadata=json.loads(str(data["metadata_json"])),
            )
    except (OSError, KeyError, ValueError) as exc:
        raise ClassifierError(f"cannot load classifier model {path}: {exc}") from exc
    if model.feature_mean.shape != (N_FEATURES,) or weights[0].shape[0] != N_FEATURES:
        raise ClassifierError(f"{path}: model expects {weights[0].shape[0]} features, "
                              f"this code computes {N_FEATURES}")
    return model


@functools.lru_cache(maxsize=8)
def cached_model(path: str = "") -> DogModel:
    """The model at ``path`` (empty: the bundled one), loaded once per process."""
    return load_model(path or DEFAULT_MODEL_PATH)


class DogClassifier:
    """Stateful per-device scorer: mel rows in, smoothed dog probabilities out, delayed.

    ``scores(mel_db)`` returns one score per step, for the steps starting ``delay_steps``
    before the first row given (the first call of a stream returns ``delay_steps`` fewer);
    ``flush()`` returns the scores of the held-back steps at the end of a stream.
    Smoothing is a centred moving average of ``smoothing_steps`` (odd) probabilities.
    """

    def __init__(
        self, model: DogModel, smoothing_steps: int = 1, min_band_level_db: float = 0.0
    ) -> None:
        self.model = model
        self.model_version = model.version
        self.smoothing_steps = max(1, int(smoothing_steps) | 1)
        self.min_band_level_db = min_band_level_db
        self.features = StepFeatures()
        self.delay_steps = StepFeatures.delay_steps + self.smoothing_steps // 2
        self.reset()

    def reset(self) -> None:
        """Forget all context (after a gap in the data)."""
        self.features.reset()
        self._raw: np.ndarray | None = None  # unsmoothed probabilities still needed
        self._levels = np.zeros(0)

    def _raw_scores(self, features: np.ndarray, loudest_db: np.ndarray) -> np.ndarray:
        probabilities = self.model.probabilities(features)
        probabilities[loudest_db < self.min_band_level_db] = 0.0
        return probabilities

    def _smooth(self, raw: np.ndarray, final: bool) -> np.ndarray:
        half = self.smoothing_steps // 2
        if half == 0:
            return raw
        if self._raw is None:
            if raw.size == 0:
                return raw
            self._raw = np.repeat(raw[:1], half)
        buffer = np.concatenate([self._raw, raw])
        if final:
            buffer = np.concatenate([buffer, np.repeat(buffer[-1:], half)])
        if buffer.size < self.smoothing_steps:
            self._raw = buffer
            return np.zeros(0)
        kernel = np.full(self.smoothing_steps, 1.0 / self.smoothing_steps)
        out = np.convolve(buffer, kernel, mode="valid")
        self._raw = None if final else buffer[-(2 * half) :]
        return out

    def scores(self, mel_db: np.ndarray) -> np.ndarray:
        """Scores (0..1) of the steps that now have full context."""
        levels = np.asarray(mel_db, dtype=np.float32).max(axis=1)
        features = self.features.process(mel_db)
        if self._levels.size == 0 and levels.size:
            self._levels = np.repeat(levels[:1], CONTEXT_STEPS)
        all_levels = np.concatenate([self._levels, levels])
        loudest = _levels_max(all_levels)[: features.shape[0]]
        self._levels = all_levels[-2 * CONTEXT_STEPS :]
        return self._smooth(self._raw_scores(features, loudest), final=False)

    def flush(self) -> np.ndarray:
        """Scores of the held-back steps at the end of a stream; then starts afresh."""
        features = self.features.flush()
        levels = np.concatenate([self._levels, np.repeat(self._levels[-1:], CONTEXT_STEPS)])
        loudest = _levels_max(levels)[: features.shape[0]]
        out = self._smooth(self._raw_scores(features, loudest), final=True)
        self.reset()
        return out


def _levels_max(levels: np.ndarray) -> np.ndarray:
    if levels.size < WINDOW_STEPS:
        return np.zeros(0, dtype=np.float32)
    return _window_max(levels[:, None])[:, 0]
