"""The dog head: a dog score per YAMNet patch from its embedding and class scores, fused with
the small CNN's per-20-ms score.

The sensor runs YAMNet on 0.96-s patches at a 0.48-s hop and, since wire v4 (issue 34), this
head on each patch's 1,024-d embedding and 521 class scores: the frame carries the patch's
dog score (``pd``), never the embedding or the class scores, from which words could be told
(docs/PRIVACY.md). The analyzer fuses it with the CNN's score per 20-ms step (``dog_s``):

- :meth:`DogHead.patch_scores` turns each patch's embedding and class scores into a dog score,
  0..1. The untrained default is YAMNet untouched: the highest score over its dog classes
  (``DOG_CLASSES``). A trained head (``barkwatch-train head``, ``models/dog_head.npz``) is a small
  network on the standardised embedding and the class scores' log-odds.
- :func:`step_head_scores` spreads patch scores over 20-ms steps: each step takes the highest
  score of the patches whose window holds its centre. It is the non-streaming reference that the
  pipeline's streaming code is tested against.
- :meth:`DogHead.fuse` combines the CNN's step score with the head's step score into the score
  the event tracker reads. The default is their maximum; a trained head may ask for their
  minimum (an event needs both networks: the CNN's 20-ms onsets, the head's veto on what YAMNet
  knows is not a dog; docs/DETECTOR.md) or carry a logistic fusion on their log-odds.

Interface kept stable for the pipeline (engineer G, issue 24): ``DogHead.load(path=None)``,
``version``, ``patch_scores(embeddings, class_scores)``, ``fuse(cnn_steps, head_at_steps)`` and
``step_head_scores(patch_starts_s, patch_scores, n_steps, hop_s, patch_s)``. A change to these
is announced here and in the commit message that makes it.

File format (``.npz``, no pickled objects): ``version`` (str), ``n_layers`` (int), ``w0, b0,
w1, b1, ...`` (dense layers, ReLU between them, sigmoid after the last), ``feature_mean`` and
``feature_scale`` (standardisation of the input features), ``use_class_scores`` (bool: the
521 log-odds follow the 1,024 embedding values), optional ``fusion`` (3 weights on [logit cnn,
logit head, 1]), optional ``fusion_kind`` ("max", "min" or "logistic"; absent: "logistic"
when ``fusion`` is there, else "max"), optional ``on_threshold``/``off_threshold`` (the event
tracker's thresholds the fused score was tuned for, kept for the pipeline's settings),
optional ``yamnet_veto`` (a float b: a trained head's patch score is capped at
sigmoid(logit(untouched YAMNet's dog score) + b), so a patch that YAMNet itself finds no dog in
cannot pass, whatever the head learnt; docs/DETECTOR.md, "YAMNet's veto").
"""

from __future__ import annotations

import functools
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.special import expit

from sensor.dog_cnn import ClassifierError
from sensor.yamnet_network import (
    EMBEDDING_SIZE,
    MODELS_DIR,
    N_CLASSES,
    dog_class_indices,
    load_class_names,
)

DEFAULT_HEAD_PATH = MODELS_DIR / "dog_head.npz"
DEFAULT_VERSION = "yamnet-dog-max"  # untouched YAMNet, fused with the CNN by maximum
FUSION_KINDS = ("max", "min", "logistic", "head")  # "head": the head's score alone
PATCH_S = 0.96  # YAMNet's patch (sensor.yamnet_features.PATCH_S)
STEP_S = 0.02  # the CNN's step (sensor.features)
_LOGIT_CLIP = 1e-6  # scores are clipped to [eps, 1 - eps] before log-odds: finite inputs


@functools.lru_cache(maxsize=8)
def cached_head(path: str = "") -> DogHead:
    """The dog head at ``path`` (empty: the bundled one, else untouched YAMNet), loaded once
    per process (the sensor's networks, its gate and the analyzer's pipelines share it)."""
    return DogHead.load(path or None)


def head_version(versions: str) -> str | None:
    """The dog head's version in a frame's ``mv`` (``...+head-<version>``); None: none named."""
    _, found, version = versions.partition("+head-")
    return version if found else None


def logit(p: np.ndarray) -> np.ndarray:
    """Log-odds of probabilities, clipped so that 0 and 1 stay finite (about +-13.8)."""
    q = np.clip(np.asarray(p, dtype=np.float64), _LOGIT_CLIP, 1.0 - _LOGIT_CLIP)
    return np.log(q) - np.log1p(-q)


@dataclass(frozen=True, eq=False)
class DogHead:
    """Patch dog scores from YAMNet's outputs, and their fusion with the CNN's step scores."""

    version: str = DEFAULT_VERSION
    layers: tuple[tuple[np.ndarray, np.ndarray], ...] = ()  # () = untouched YAMNet dog max
    feature_mean: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    feature_scale: np.ndarray = field(default_factory=lambda: np.ones(0, np.float32))
    use_class_scores: bool = True
    fusion: np.ndarray | None = None  # [a, b, c]: sigmoid(a logit(cnn) + b logit(head) + c)
    fusion_kind: str | None = None  # "max", "min", "logistic"; None: logistic with ``fusion``
    on_threshold: float | None = None
    off_threshold: float | None = None
    yamnet_veto: float | None = None  # b: patch scores capped at sigmoid(logit(YAMNet dog) + b)
    sensor_scores: bool = False  # patch scores: the sensor's fine-tuned network's (``dg``)
    dog_indices: np.ndarray = field(default_factory=lambda: dog_class_indices(load_class_names()))

    @classmethod
    def load(cls, path: Path | str | None = None) -> DogHead:
        """The head in ``path``; without one, the bundled ``models/dog_head.npz`` if present,
        else the untrained default (untouched YAMNet, fused by maximum)."""
        if path is None or str(path) == "":
            if not DEFAULT_HEAD_PATH.is_file():
                return cls()
            path = DEFAULT_HEAD_PATH
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: np.asarray(data[name]) for name in data.files}
        except (OSError, ValueError, zipfile.BadZipFile) as error:
            raise ClassifierError(f"{path}: not a dog head file ({error})") from error
        return cls.from_arrays(arrays, source=str(path))

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], source: str = "head") -> DogHead:
        """A head from the arrays of its file (what :meth:`to_arrays` gives)."""
        try:
            version = str(arrays["version"])
            n_layers = int(arrays["n_layers"])
            layers = tuple(
                (
                    np.asarray(arrays[f"w{i}"], np.float32),
                    np.asarray(arrays[f"b{i}"], np.float32),
                )
                for i in range(n_layers)
            )
            use_class_scores = bool(arrays["use_class_scores"])
            mean = np.asarray(arrays["feature_mean"], np.float32)
            scale = np.asarray(arrays["feature_scale"], np.float32)
        except (KeyError, ValueError, TypeError) as error:
            raise ClassifierError(f"{source}: missing or malformed head entry ({error})") from error
        n_features = EMBEDDING_SIZE + (N_CLASSES if use_class_scores else 0)
        width = n_features
        for i, (w, b) in enumerate(layers):
            if w.ndim != 2 or w.shape[0] != width or b.shape != (w.shape[1],):
                raise ClassifierError(
                    f"{source}: layer {i} has weights {w.shape} and bias {b.shape}; "
                    f"expected ({width}, m) and (m,)"
                )
            width = w.shape[1]
        if layers and width != 1:
            raise ClassifierError(f"{source}: the last layer gives {width} outputs, expected 1")
        if layers and (mean.shape != (n_features,) or scale.shape != (n_features,)):
            raise ClassifierError(
                f"{source}: feature_mean/feature_scale must have {n_features} values"
            )
        fusion = np.asarray(arrays["fusion"], np.float64) if "fusion" in arrays else None
        if fusion is not None and fusion.shape != (3,):
            raise ClassifierError(f"{source}: fusion must hold 3 weights, not {fusion.shape}")
        kind = str(arrays["fusion_kind"]) if "fusion_kind" in arrays else (
            "logistic" if fusion is not None else "max")  # fmt: skip
        if kind not in FUSION_KINDS or (kind == "logistic") != (fusion is not None):
            raise ClassifierError(
                f"{source}: fusion_kind {kind!r} must be one of {FUSION_KINDS}, "
                "with fusion weights exactly when logistic"
            )
        thresholds = [
            float(arrays[name]) if name in arrays else None
            for name in ("on_threshold", "off_threshold")
        ]
        source_of_scores = str(arrays.get("patch_scores_from", "head"))
        if source_of_scores not in ("head", "sensor"):
            raise ClassifierError(f"{source}: patch_scores_from must be 'head' or 'sensor', "
                                  f"not {source_of_scores!r}")
        if source_of_scores == "sensor" and layers:
            raise ClassifierError(f"{source}: a head whose patch scores come from the sensor "
                                  "has no layers of its own")
        veto = float(arrays["yamnet_veto"]) if "yamnet_veto" in arrays else None
        if veto is not None and not (np.isfinite(veto) and layers):
            raise ClassifierError(f"{source}: yamnet_veto must be finite, on a trained head")
        return cls(
            version=version,
            layers=layers,
            feature_mean=mean,
            feature_scale=scale,
            use_class_scores=use_class_scores,
            fusion=fusion,
            fusion_kind=kind,
            on_threshold=thresholds[0],
            off_threshold=thresholds[1],
            yamnet_veto=veto,
            sensor_scores=source_of_scores == "sensor",
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays of this head's file (:meth:`save` writes them)."""
        arrays: dict[str, np.ndarray] = {
            "version": np.array(self.version),
            "n_layers": np.array(len(self.layers)),
            "use_class_scores": np.array(self.use_class_scores),
            "feature_mean": self.feature_mean,
            "feature_scale": self.feature_scale,
        }
        for i, (w, b) in enumerate(self.layers):
            arrays[f"w{i}"] = w
            arrays[f"b{i}"] = b
        arrays["fusion_kind"] = np.array(self.kind)
        if self.fusion is not None:
            arrays["fusion"] = np.asarray(self.fusion, np.float64)
        if self.on_threshold is not None:
            arrays["on_threshold"] = np.array(self.on_threshold)
        if self.off_threshold is not None:
            arrays["off_threshold"] = np.array(self.off_threshold)
        if self.yamnet_veto is not None:
            arrays["yamnet_veto"] = np.array(self.yamnet_veto)
        if self.sensor_scores:
            arrays["patch_scores_from"] = np.array("sensor")
        return arrays

    @property
    def kind(self) -> str:
        """How :meth:`fuse` combines the scores: ``fusion_kind``, else logistic when the head
        has fusion weights, else max."""
        if self.fusion_kind is not None:
            return self.fusion_kind
        return "logistic" if self.fusion is not None else "max"

    def save(self, path: Path | str) -> None:
        """Write this head's file (``.npz``, no pickled objects)."""
        np.savez(Path(path), **self.to_arrays())  # type: ignore[arg-type]

    def features(self, embeddings: np.ndarray, class_scores: np.ndarray) -> np.ndarray:
        """The head's standardised input: embedding, then (optionally) class-score log-odds."""
        parts = [np.asarray(embeddings, np.float64)]
        if self.use_class_scores:
            parts.append(logit(class_scores))
        raw = np.concatenate(parts, axis=1)
        if not self.layers:
            return raw
        return (raw - self.feature_mean) / self.feature_scale

    def patch_scores(self, embeddings: np.ndarray, class_scores: np.ndarray,
                     sensor_scores: np.ndarray | None = None) -> np.ndarray:
        """Dog score of each patch, 0..1, from its embedding (k x 1024) and its YAMNet class
        scores (k x 521, probabilities); a head with ``sensor_scores`` returns the sensor's
        fine-tuned scores (k, the frame's ``dg``) where the frame has them, else untouched
        YAMNet's (a sensor that runs YAMNet alone)."""
        emb = np.asarray(embeddings, np.float32)
        ys = np.asarray(class_scores, np.float32)
        if emb.ndim != 2 or emb.shape[1] != EMBEDDING_SIZE:
            raise ClassifierError(f"embeddings: expected (k, {EMBEDDING_SIZE}), got {emb.shape}")
        if ys.shape != (len(emb), N_CLASSES):
            raise ClassifierError(
                f"class scores: expected ({len(emb)}, {N_CLASSES}), got {ys.shape}"
            )
        if not (np.all(np.isfinite(emb)) and np.all(np.isfinite(ys))):
            raise ClassifierError("embeddings or class scores hold NaN or infinity")
        yamnet = ys[:, self.dog_indices].max(axis=1)  # untouched: its likeliest dog class
        if self.sensor_scores and sensor_scores is not None:
            tuned = np.asarray(sensor_scores, np.float32)
            if tuned.shape != (len(emb),) or not np.all(np.isfinite(tuned)):
                raise ClassifierError(f"sensor dog scores: expected {len(emb)} finite values, "
                                      f"got shape {tuned.shape}")
            return np.clip(tuned, 0.0, 1.0)
        if not self.layers:
            return yamnet.astype(np.float32)
        x = self.features(emb, ys)
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < len(self.layers) - 1:
                x = np.maximum(x, 0.0)
        scores = np.asarray(expit(x[:, 0]), np.float32)
        if self.yamnet_veto is not None:
            scores = capped_by_yamnet(scores, yamnet, self.yamnet_veto)
        return scores

    def fuse(self, cnn_steps: np.ndarray, head_at_steps: np.ndarray) -> np.ndarray:
        """Fused dog score per 20-ms step, 0..1, from the CNN's score and the head's score at
        the same steps (:func:`step_head_scores`)."""
        cnn = np.asarray(cnn_steps, np.float64)
        head = np.asarray(head_at_steps, np.float64)
        if cnn.shape != head.shape or cnn.ndim != 1:
            raise ClassifierError(
                f"fuse: CNN scores {cnn.shape} and head scores {head.shape} must be equal 1-d"
            )
        head = np.nan_to_num(head, nan=0.0)
        if self.kind == "head":
            return head.astype(np.float32)
        if self.kind == "min":
            return np.minimum(cnn, head).astype(np.float32)
        if self.fusion is None or self.kind != "logistic":
            return np.maximum(cnn, head).astype(np.float32)
        a, b, c = self.fusion
        return np.asarray(expit(a * logit(cnn) + b * logit(head) + c), np.float32)


def capped_by_yamnet(scores: np.ndarray, yamnet: np.ndarray, veto: float) -> np.ndarray:
    """Patch scores capped at sigmoid(logit(``yamnet``) + ``veto``), ``yamnet`` being untouched
    YAMNet's dog score of the same patches: a patch that YAMNet finds no dog in cannot pass,
    whatever a trained head says. The trained head learnt birds and poultry as dogs (parrot,
    black grouse, chickens, owl: 0.8-0.99) where YAMNet says 0.00-0.07 (docs/DETECTOR.md)."""
    cap = logit(yamnet) + veto
    return np.asarray(expit(np.minimum(logit(scores), cap)), np.float32)


def step_head_scores(
    patch_starts_s: np.ndarray,
    patch_scores: np.ndarray,
    n_steps: int,
    hop_s: float = STEP_S,
    patch_s: float = PATCH_S,
) -> np.ndarray:
    """Per step, the highest score of the patches whose window [start, start + patch_s) holds
    the step's centre ((j + 0.5) hop_s, seconds from the same origin as the starts); 0 where
    no patch covers the step."""
    starts = np.asarray(patch_starts_s, np.float64)
    scores = np.asarray(patch_scores, np.float64)
    if starts.shape != scores.shape or starts.ndim != 1:
        raise ClassifierError(
            f"step_head_scores: {starts.shape} starts and {scores.shape} scores must match"
        )
    if hop_s <= 0 or patch_s <= 0 or n_steps < 0:
        raise ClassifierError("step_head_scores: hop_s and patch_s must be > 0, n_steps >= 0")
    out = np.zeros(n_steps, np.float64)
    # step j is covered when start <= (j + 0.5) hop < start + patch: j in [lo, hi)
    lo = np.ceil(starts / hop_s - 0.5).astype(np.int64)
    hi = np.ceil((starts + patch_s) / hop_s - 0.5).astype(np.int64)
    for first, end, score in zip(
        np.clip(lo, 0, n_steps), np.clip(hi, 0, n_steps), scores, strict=True
    ):
        if end > first:
            np.maximum(out[first:end], score, out=out[first:end])
    return out.astype(np.float32)


__all__ = ["DEFAULT_HEAD_PATH", "DogHead", "capped_by_yamnet", "logit", "step_head_scores"]
