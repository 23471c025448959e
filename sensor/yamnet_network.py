"""YAMNet on log-mel patches: AudioSet class scores, the 1,024-d embedding, a dog score.

The sensor runs ``models/dog_yamnet.onnx``: YAMNet (``models/yamnet.onnx``, converted by
``scripts/convert_yamnet.py``; provenance and licences in ``models/YAMNET_NOTICE.md``) with a
second copy of its separable blocks 7-13 fine-tuned for dog vocalisations on the frozen blocks
before them (``barkwatch-train finetune --export``, issue 39), which adds a dog logit per patch.
Plain ``yamnet.onnx`` still loads (no fine-tuned score). Run with onnxruntime on one thread;
the input is ``sensor.yamnet_features``' patches.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit

from sensor.dog_cnn import ClassifierError

LOG = logging.getLogger(__name__)

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
DEFAULT_YAMNET_PATH = MODELS_DIR / "yamnet.onnx"
# What the sensor runs: YAMNet with a second, fine-tuned top for dogs on its frozen bottom
# (training/finetune.py, ``barkwatch-train finetune --export``; models/MODEL_CARD.md). It gives
# YAMNet's logits and embedding unchanged and a third output, the dog logit.
DEFAULT_SENSOR_NETWORK_PATH = MODELS_DIR / "dog_yamnet.onnx"
DEFAULT_CLASS_MAP_PATH = MODELS_DIR / "yamnet_class_map.csv"
PATCH_SHAPE = (96, 64)  # frames x mel bands (sensor.yamnet_features)
N_CLASSES = 521
EMBEDDING_SIZE = 1024
# AudioSet's dog vocalizations (the ontology's children of "Dog", with "Dog" itself): the
# ordinance's "barks, whines, howls, bays, cries" (section 701, subd. 5).
DOG_CLASSES = ("Dog", "Bark", "Yip", "Howl", "Bow-wow", "Growling", "Whimper (dog)")


@dataclass(frozen=True)
class YamnetOutput:
    """The network's answer for n patches."""

    logits: np.ndarray  # n x 521, before the sigmoid
    embeddings: np.ndarray  # n x 1024, global average pool of the last convolution
    dog_logits: np.ndarray | None = None  # n, the fine-tuned top's; None from YAMNet alone

    @property
    def scores(self) -> np.ndarray:
        """n x 521 class probabilities (YAMNet's sigmoid outputs), 0..1."""
        return np.asarray(expit(self.logits), dtype=np.float32)


def load_class_names(path: Path = DEFAULT_CLASS_MAP_PATH) -> tuple[str, ...]:
    """The 521 display names in output order, from YAMNet's class map CSV."""
    try:
        with path.open(newline="", encoding="utf-8") as file:
            rows = list(csv.DictReader(file))
    except OSError as error:
        raise ClassifierError(f"{path}: cannot read the YAMNet class map ({error})") from error
    names = tuple(row.get("display_name") or "" for row in rows)
    if len(names) != N_CLASSES or not all(names):
        raise ClassifierError(f"{path}: expected {N_CLASSES} named classes, found {len(names)}")
    return names


def dog_class_indices(names: tuple[str, ...]) -> np.ndarray:
    """Output indices of DOG_CLASSES in ``names``."""
    missing = [name for name in DOG_CLASSES if name not in names]
    if missing:
        raise ClassifierError(f"YAMNet class map lacks the dog classes {missing}")
    return np.array([names.index(name) for name in DOG_CLASSES])


class YamnetNetwork:
    """YAMNet in an onnxruntime session (one thread: the sensor's budget is per core)."""

    def __init__(
        self,
        model_path: Path = DEFAULT_SENSOR_NETWORK_PATH,
        class_map_path: Path = DEFAULT_CLASS_MAP_PATH,
        threads: int = 1,
    ) -> None:
        try:
            import onnxruntime as ort
        except ImportError as error:  # the sensor extra installs it
            raise ClassifierError(
                f"onnxruntime is needed to run {model_path.name}: pip install onnxruntime"
            ) from error
        if not model_path.is_file():
            raise ClassifierError(f"{model_path}: no such YAMNet model (scripts/convert_yamnet.py)")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self._session: Any = ort.InferenceSession(
                str(model_path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:  # onnxruntime raises its own types for a bad file
            raise ClassifierError(f"{model_path}: not a loadable ONNX network ({error})") from error
        self._input = self._session.get_inputs()[0].name
        outputs = len(self._session.get_outputs())
        if outputs not in (2, 3):
            raise ClassifierError(f"{model_path}: {outputs} outputs; YAMNet gives 2 (logits, "
                                  "embeddings), the sensor's network 3 (and the dog logit)")
        self.fine_tuned = outputs == 3
        self.model_path = model_path
        self.class_names = load_class_names(class_map_path)
        self.dog_indices = dog_class_indices(self.class_names)

    def run(self, patches: np.ndarray) -> YamnetOutput:
        """Logits and embeddings of ``patches`` (n x 96 x 64, or n x 1 x 96 x 64)."""
        array = np.asarray(patches, dtype=np.float32)
        if array.ndim == 3:
            array = array[:, None]
        if array.ndim != 4 or array.shape[1:] != (1, *PATCH_SHAPE):
            raise ClassifierError(
                f"YAMNet patches: expected shape (n, 96, 64), got {np.shape(patches)}"
            )
        if not np.all(np.isfinite(array)):
            first = int(np.flatnonzero((~np.isfinite(array.reshape(len(array), -1))).any(1))[0])
            raise ClassifierError(f"YAMNet patches: patch {first} holds NaN or infinity")
        if len(array) == 0:
            return YamnetOutput(
                np.zeros((0, N_CLASSES), np.float32), np.zeros((0, EMBEDDING_SIZE), np.float32),
                np.zeros(0, np.float32) if self.fine_tuned else None,
            )
        outputs = self._session.run(None, {self._input: array})
        return YamnetOutput(outputs[0], outputs[1], outputs[2] if self.fine_tuned else None)

    @staticmethod
    def fine_tuned_dog_scores(output: YamnetOutput) -> np.ndarray | None:
        """Per patch, the fine-tuned top's dog probability (0..1); None from YAMNet alone."""
        if output.dog_logits is None:
            return None
        return np.asarray(expit(output.dog_logits), np.float32)

    def dog_scores(self, output: YamnetOutput) -> np.ndarray:
        """Per patch, the highest probability over DOG_CLASSES (0..1)."""
        return np.asarray(expit(output.logits[:, self.dog_indices].max(axis=1)), np.float32)
