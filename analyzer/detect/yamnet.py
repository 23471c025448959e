"""YAMNet, as the analyzer names it: it runs on the sensor since wire v2 (issue 24).

The runner lives in :mod:`sensor.yamnet_network`; the analyzer needs only its class names and
sizes (the dog head reads the embeddings and class scores the frames carry).
"""

from __future__ import annotations

from sensor.yamnet_network import (
    DEFAULT_CLASS_MAP_PATH,
    DEFAULT_YAMNET_PATH,
    DOG_CLASSES,
    EMBEDDING_SIZE,
    MODELS_DIR,
    N_CLASSES,
    PATCH_SHAPE,
    YamnetNetwork,
    YamnetOutput,
    dog_class_indices,
    load_class_names,
)

__all__ = [
    "DEFAULT_CLASS_MAP_PATH",
    "DEFAULT_YAMNET_PATH",
    "DOG_CLASSES",
    "EMBEDDING_SIZE",
    "MODELS_DIR",
    "N_CLASSES",
    "PATCH_SHAPE",
    "YamnetNetwork",
    "YamnetOutput",
    "dog_class_indices",
    "load_class_names",
]
