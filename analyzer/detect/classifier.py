"""The small dog CNN, as the analyzer names it: it runs on the sensor since wire v2 (issue 24).

Everything lives in :mod:`sensor.dog_cnn` (the sensor never imports the analyzer); this module
re-exports it so that training, the head and older callers keep one name for it.
"""

from __future__ import annotations

from sensor.dog_cnn import (
    BACKGROUND_PERCENTILE_ROW,
    BACKGROUND_RISE_S,
    DEFAULT_MODEL_PATH,
    INPUT_POOLS,
    INPUT_SCALE_DB,
    INPUT_VERSION,
    LAYER_KINDS,
    LEVEL_RANGE_DB,
    N_BANDS,
    N_CHANNELS,
    N_MELS,
    POOL,
    PROMINENCE_MAX_DB,
    CentredMean,
    ClassifierError,
    ConvNet,
    DogClassifier,
    DogModel,
    Layer,
    StepInputs,
    cached_model,
    inputs_of_stream,
    load_model,
    logits_of_stream,
)

__all__ = [
    "BACKGROUND_PERCENTILE_ROW",
    "BACKGROUND_RISE_S",
    "CentredMean",
    "ClassifierError",
    "ConvNet",
    "DEFAULT_MODEL_PATH",
    "DogClassifier",
    "DogModel",
    "INPUT_POOLS",
    "INPUT_SCALE_DB",
    "INPUT_VERSION",
    "LAYER_KINDS",
    "LEVEL_RANGE_DB",
    "Layer",
    "N_BANDS",
    "N_CHANNELS",
    "N_MELS",
    "POOL",
    "PROMINENCE_MAX_DB",
    "StepInputs",
    "cached_model",
    "inputs_of_stream",
    "load_model",
    "logits_of_stream",
]
