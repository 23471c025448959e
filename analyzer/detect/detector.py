"""The scorers' versions: which networks a configuration names.

Since wire v2 (issue 24) the small CNN runs on the sensor (:mod:`sensor.dog_cnn`) and the
analyzer fuses its scores with the dog head's (:mod:`analyzer.detect.pipeline`); this module
names the CNN model that :class:`DetectorSettings` selects (``MODEL_VERSION``: the bundled
one, loaded on first use). The bundled model still raises false alarms on gulls, chickens,
children and sirens, and misses distant barks (models/MODEL_CARD.md).
"""

from __future__ import annotations

from analyzer.detect.classifier import cached_model
from analyzer.detect.settings import DetectorSettings


def model_version(settings: DetectorSettings | None = None) -> str:
    """Version id of the CNN model the settings select (the bundled one by default)."""
    return cached_model(settings.model_path if settings else "").version


def __getattr__(name: str) -> str:
    # MODEL_VERSION is read from the bundled model file when first asked for, not at import.
    if name == "MODEL_VERSION":
        return model_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
