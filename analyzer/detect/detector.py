"""The dog-vocalization scorer the pipeline uses: the trained classifier, as configured.

``analyzer.detect.classifier`` holds the features, the model and the streaming scorer; this module
only chooses the model file from :class:`DetectorSettings` and names the bundled model's
version (``MODEL_VERSION``, loaded on first use). The bundled model is a small convolutional
network; it still raises false alarms on gulls, chickens, children and sirens, and misses
distant barks (models/MODEL_CARD.md).
"""

from __future__ import annotations

from analyzer.detect.classifier import DogClassifier, cached_model
from analyzer.detect.settings import DetectorSettings


def make_scorer(settings: DetectorSettings, hop_s: float) -> DogClassifier:
    """A fresh per-device scorer for frames whose mel rows are ``hop_s`` apart."""
    smoothing_steps = max(1, round(settings.smoothing_s / hop_s))
    return DogClassifier(
        cached_model(settings.model_path),
        smoothing_steps=smoothing_steps,
        min_band_level_db=settings.min_band_level_db,
    )


def model_version(settings: DetectorSettings | None = None) -> str:
    """Version id of the model the settings select (the bundled one by default)."""
    return cached_model(settings.model_path if settings else "").version


def __getattr__(name: str) -> str:
    # MODEL_VERSION is read from the bundled model file when first asked for, not at import.
    if name == "MODEL_VERSION":
        return model_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
