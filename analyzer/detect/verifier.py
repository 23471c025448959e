"""The event verifier (issue 39, deliverable 2): candidates found at low event thresholds are
kept or dropped by a small model over what is known when each one ends.

The tracker (:mod:`analyzer.detect.events`) finds candidate events where the fused score
reaches the verifier's own, low on/off thresholds. When a candidate ends, its features are
computed from the pipeline's step series of the last ``BUFFER_S`` seconds and the candidates
before it (:data:`FEATURES`, all known at its end, so nothing waits for later frames):

- its length, s; the highest and the mean fused score in it; the highest fine-tuned patch score
  (``dg``) and the highest smoothed CNN score in it;
- its prominence: its highest fast A-weighted level over the 10th percentile of the levels of the
  ``CONTEXT_S`` before it and itself, dB;
- how many earlier candidates started within 10 and 30 s before it, and the highest fused score
  among those of the last 30 s (barks come in bouts);
- the share of its steps and the ``CONTEXT_S`` before it that carry a ``dg`` score, i.e. left the
  sensor as dog seconds (``sensor.gate``).

A candidate that began before the steps kept (over ``BUFFER_S`` long, or open across a restart
from a journal written without a verifier) cannot be judged and is kept as the tracker found it.

The model is gradient-boosted trees (scikit-learn's ``HistGradientBoostingClassifier``, trained
by ``docs/experiments/detector-2026-12-06c/event_verifier.py --export``) stored as plain arrays
(:meth:`VerifierModel.save`) and evaluated here with numpy: a candidate is kept when its
probability reaches the model's ``threshold``. Pure logic over step series; the same series give
the same decisions.
"""

from __future__ import annotations

import functools
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analyzer.detect.head import ANALYZER_HEAD_PATH
from analyzer.errors import AnalyzerError
from sensor.dog_head import MODELS_DIR, cached_head

FEATURES = ("length", "fused max", "fused mean", "dg max", "cnn max", "prominence",
            "before 10 s", "before 30 s", "before max", "dog seconds")
CONTEXT_S = 20.0  # levels and dog seconds: this long before a candidate, and the candidate
HISTORY_S = 30.0  # earlier candidates counted this far back
BUFFER_S = 120.0  # step series kept: a longer candidate is judged on its last part
_FORMAT = "barkwatch-event-verifier-1"
# The bundled verifier (models/MODEL_CARD.md): the default of [detector] verifier_path.
BUNDLED_VERIFIER_PATH = MODELS_DIR / "dog_verifier.npz"
NO_VERIFIER = "none"  # [detector] verifier_path: events at the detector's own thresholds


class VerifierError(AnalyzerError):
    """A verifier file that cannot be used (the message names the file and what is wrong)."""


@dataclass(frozen=True)
class VerifierModel:
    """Trees over :data:`FEATURES`: each tree's nodes as parallel arrays (feature, threshold,
    left, right, leaf, value); probability = sigmoid(baseline + the leaves' values), a node's
    sample going left when its feature is at or below the threshold."""

    version: str
    baseline: float
    feature: np.ndarray  # (trees, nodes) int
    threshold: np.ndarray  # (trees, nodes) float
    left: np.ndarray  # (trees, nodes) int
    right: np.ndarray  # (trees, nodes) int
    leaf: np.ndarray  # (trees, nodes) bool
    value: np.ndarray  # (trees, nodes) float
    keep_at: float  # a candidate is kept when its probability reaches this
    on_threshold: float  # the candidates' event thresholds
    off_threshold: float

    @classmethod
    def keeping_all(cls, on_threshold: float, off_threshold: float) -> VerifierModel:
        """A model of one leaf that keeps every candidate found at those thresholds: what
        training runs the pipeline with to see every candidate and its features."""
        one = np.zeros((1, 1))
        return cls("keep-all", 0.0, one.astype(np.int64), one, one.astype(np.int64),
                   one.astype(np.int64), np.ones((1, 1), bool), one, 0.0, on_threshold,
                   off_threshold)

    def probability(self, x: np.ndarray) -> float:
        """The model's probability that the candidate with features ``x`` is a dog."""
        raw = self.baseline
        for t in range(self.feature.shape[0]):
            node = 0
            while not self.leaf[t, node]:
                node = (self.left[t, node] if x[self.feature[t, node]] <= self.threshold[t, node]
                        else self.right[t, node])
            raw += float(self.value[t, node])
        return float(1.0 / (1.0 + np.exp(-raw)))

    def save(self, path: Path | str) -> None:
        """Write the model as ``.npz`` (no pickled objects)."""
        np.savez(Path(path), format=np.array(_FORMAT), version=np.array(self.version),
                 features=np.array(FEATURES), baseline=np.array(self.baseline),
                 feature=self.feature, threshold=self.threshold, left=self.left,
                 right=self.right, leaf=self.leaf, value=self.value,
                 keep_at=np.array(self.keep_at), on_threshold=np.array(self.on_threshold),
                 off_threshold=np.array(self.off_threshold))

    @classmethod
    def load(cls, path: Path | str) -> VerifierModel:
        """Read a model file; :class:`VerifierError` naming the file for anything else."""
        try:
            with np.load(Path(path), allow_pickle=False) as data:
                if str(data["format"]) != _FORMAT:
                    raise VerifierError(f"{path}: not an event verifier ({data['format']})")
                if tuple(str(f) for f in data["features"]) != FEATURES:
                    raise VerifierError(f"{path}: made for features {list(data['features'])}, "
                                        f"this analyzer computes {list(FEATURES)}")
                model = cls(str(data["version"]), float(data["baseline"]),
                            data["feature"].astype(np.int64), data["threshold"].astype(float),
                            data["left"].astype(np.int64), data["right"].astype(np.int64),
                            data["leaf"].astype(bool), data["value"].astype(float),
                            float(data["keep_at"]), float(data["on_threshold"]),
                            float(data["off_threshold"]))
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise VerifierError(f"{path}: cannot read the event verifier ({exc})") from exc
        shapes = {a.shape for a in (model.feature, model.threshold, model.left, model.right,
                                    model.leaf, model.value)}
        nodes = model.feature.shape[1] if model.feature.ndim == 2 else 0
        if (len(shapes) != 1 or model.feature.ndim != 2 or not nodes
                or model.feature.min() < 0 or model.feature.max() >= len(FEATURES)
                or min(model.left.min(), model.right.min()) < 0
                or max(model.left.max(), model.right.max()) >= nodes):
            raise VerifierError(f"{path}: the trees' arrays do not fit together")
        return model


@dataclass
class VerifierState:
    """The step series of the last ``BUFFER_S`` s and the earlier candidates of one device:
    what a candidate's features need (checkpointed with the pipeline)."""

    start_ns: int | None = None  # capture time of the first step kept
    hop_ns: int = 0
    fused: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    dg: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    cnn: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    laf: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    earlier: list[tuple[int, float]] = field(default_factory=list)  # (onset ns, peak score)

    def observe(self, start_ns: int, hop_ns: int, fused: np.ndarray, dg: np.ndarray,
                cnn: np.ndarray, laf: np.ndarray) -> None:
        """Consecutive steps from ``start_ns`` (after the ones kept, or after a gap)."""
        if self.start_ns is None or start_ns != self.start_ns + self.fused.size * hop_ns:
            self.start_ns, self.hop_ns = start_ns, hop_ns
            self.fused = self.dg = self.cnn = self.laf = np.zeros(0, np.float32)
        self.fused = np.concatenate([self.fused, np.asarray(fused, np.float32)])
        self.dg = np.concatenate([self.dg, np.nan_to_num(np.asarray(dg, np.float32))])
        self.cnn = np.concatenate([self.cnn, np.asarray(cnn, np.float32)])
        self.laf = np.concatenate([self.laf, np.asarray(laf, np.float32)])
        extra = self.fused.size - round(BUFFER_S * 1e9 / hop_ns)
        if extra > 0:
            self.fused, self.dg, self.cnn, self.laf = (
                a[extra:] for a in (self.fused, self.dg, self.cnn, self.laf))
            self.start_ns += extra * hop_ns

    def covers(self, onset_ns: int) -> bool:
        """Whether the steps kept reach back to ``onset_ns``."""
        return self.start_ns is not None and self.fused.size > 0 and self.start_ns <= onset_ns

    def features(self, onset_ns: int, offset_ns: int) -> np.ndarray:
        """The candidate's :data:`FEATURES`; it joins the earlier candidates."""
        if self.start_ns is None or not self.fused.size:
            raise ValueError("no steps observed before a candidate")
        n = self.fused.size
        first = min(max(0, (onset_ns - self.start_ns) // self.hop_ns), n - 1)
        end = min(max((offset_ns - self.start_ns) // self.hop_ns, first + 1), n)
        context = slice(max(0, first - round(CONTEXT_S * 1e9 / self.hop_ns)), end)
        own = slice(first, end)
        peak = float(self.fused[own].max())
        self.earlier = [(t, p) for t, p in self.earlier if t >= onset_ns - HISTORY_S * 1e9]
        within = [(t, p) for t, p in self.earlier if t < onset_ns]
        x = np.array([
            (offset_ns - onset_ns) / 1e9, peak, float(self.fused[own].mean()),
            float(self.dg[own].max()), float(self.cnn[own].max()),
            float(self.laf[own].max() - np.percentile(self.laf[context], 10)),
            sum(t >= onset_ns - 10e9 for t, _ in within), len(within),
            max((p for _, p in within), default=0.0), float((self.dg[context] > 0).mean()),
        ], np.float64)
        self.earlier.append((onset_ns, peak))
        return x


@functools.lru_cache(maxsize=8)
def cached_verifier(path: str) -> VerifierModel:
    """:meth:`VerifierModel.load`, once per path."""
    return VerifierModel.load(path)


def configured_verifier(path: str, head_version: str | None = None) -> VerifierModel | None:
    """The verifier ``[detector] verifier_path`` names: ``"none"``, no verifier; empty, the
    bundled one when the head is the bundled one (``head_version`` None or its version), none
    with another head (the bundled verifier learnt the bundled fusion's candidates)."""
    if path == NO_VERIFIER:
        return None
    if path:
        return cached_verifier(path)
    if head_version is not None and head_version != cached_head(str(ANALYZER_HEAD_PATH)).version:
        return None
    return cached_verifier(str(BUNDLED_VERIFIER_PATH))
