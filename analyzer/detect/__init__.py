"""Detecting dog vocalizations in mel frames: the classifier, its scorer, event tracking."""

from __future__ import annotations

from analyzer.detect.classifier import (
    DEFAULT_MODEL_PATH,
    INPUT_VERSION,
    N_BANDS,
    N_CHANNELS,
    N_MELS,
    POOL,
    ClassifierError,
    DogClassifier,
    DogModel,
    Layer,
    inputs_of_stream,
    load_model,
    logits_of_stream,
)
from analyzer.detect.detector import model_version
from analyzer.detect.events import DogEvent, EventTracker
from analyzer.detect.head import DogHead, step_head_scores
from analyzer.detect.pipeline import DevicePipeline
from analyzer.detect.settings import DetectorSettings
from analyzer.detect.yamnet import DOG_CLASSES, YamnetNetwork, YamnetOutput

__all__ = [
    "ClassifierError",
    "DEFAULT_MODEL_PATH",
    "DetectorSettings",
    "DevicePipeline",
    "DOG_CLASSES",
    "DogClassifier",
    "DogEvent",
    "DogHead",
    "DogModel",
    "EventTracker",
    "INPUT_VERSION",
    "Layer",
    "YamnetNetwork",
    "YamnetOutput",
    "N_BANDS",
    "N_CHANNELS",
    "N_MELS",
    "POOL",
    "inputs_of_stream",
    "load_model",
    "logits_of_stream",
    "model_version",
    "step_head_scores",
]
