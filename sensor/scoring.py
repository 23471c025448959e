"""The networks the sensor runs on its audio (wire v2, issue 24): the small dog CNN on the mel
rows of every 20 ms step, and YAMNet on 0.96 s patches of the audio resampled to 16 kHz, with
the dog head on YAMNet's outputs (wire v4, issue 34: the head's patch score leaves the sensor,
YAMNet's embedding does not).

Both stream: audio and mel rows go in a second at a time and outputs come out as soon as they
are final, so the frames a stream gives do not depend on how it was cut into blocks. The CNN
looks ``context_steps`` (0.64 s) ahead; a patch is complete 0.975 s after it starts. The mel
rows are rounded to float16 before the CNN, as wire v1 carried them and as it was trained.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensor.dog_cnn import DogClassifier, DogModel, cached_model
from sensor.dog_head import DogHead, cached_head
from sensor.resample import TARGET_RATE_HZ, StreamResampler
from sensor.yamnet_features import MIN_CLIP_SAMPLES, PATCH_HOP_SAMPLES, YamnetFrontEnd
from sensor.yamnet_network import EMBEDDING_SIZE, N_CLASSES, YamnetNetwork

# Steps whose loudest mel band stays under this over the CNN's context score 0: digital
# silence only (the bundled model's default gate, models/MODEL_CARD.md).
CNN_GATE_DB = 0.0


@functools.lru_cache(maxsize=4)
def cached_yamnet(model_path: str = "") -> YamnetNetwork:
    """One YAMNet session per process and model (onnxruntime sessions run concurrently)."""
    return YamnetNetwork(Path(model_path)) if model_path else YamnetNetwork()


@functools.lru_cache(maxsize=4)
def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:8]


def model_versions(cnn: DogModel, yamnet: YamnetNetwork, head: DogHead) -> str:
    """What ``mv`` says: the CNN's version, YAMNet's file digest and the dog head's version,
    e.g. ``dog-cnn-3.0-6f88c2ba+yamnet-1a2b3c4d+head-dog-head-1.0-433e665f``."""
    return f"{cnn.version}+yamnet-{_file_digest(str(yamnet.model_path))}+head-{head.version}"


@dataclass(frozen=True)
class Patches:
    """YAMNet's outputs for consecutive patches; ``first`` is the index of the first one since
    the stream (or the last gap) began; patch i starts at i x 0.48 s."""

    first: int
    embeddings: np.ndarray  # k x 1024
    class_scores: np.ndarray  # k x 521, 0..1
    head_scores: np.ndarray  # k, the dog head's, 0..1
    dog_scores: np.ndarray | None = None  # k, the fine-tuned network's, 0..1 (None: YAMNet only)

    def __len__(self) -> int:
        return len(self.embeddings)


class SensorNetworks:
    """Both networks over one capture stream; feed seconds in order.

    ``worker_thread`` (offline analysis, where a file is measured as fast as it can be read):
    both networks' share of a second (the CNN; resampling, YAMNet's front end and network) runs
    on a worker thread from :meth:`begin` while the caller measures the second (levels,
    bands); :meth:`process` waits for it. The same calls on the same samples in the same
    order: the outputs are those of the single-threaded path. The sensor itself keeps to one
    core (its budget, issue 24). Call :meth:`close` when done.
    """

    def __init__(self, sample_rate: int, cnn: DogModel | None = None,
                 yamnet: YamnetNetwork | None = None,
                 worker_thread: bool = False, head: DogHead | None = None) -> None:  # fmt: skip
        self.cnn_model = cnn or cached_model("")
        self.yamnet = yamnet or cached_yamnet()
        self.head = head or cached_head()
        self.versions = model_versions(self.cnn_model, self.yamnet, self.head)
        self.cnn = DogClassifier(self.cnn_model, smoothing_steps=1, min_band_level_db=CNN_GATE_DB)
        self.resampler = StreamResampler(sample_rate)
        self.front_end = YamnetFrontEnd()
        self._worker = (ThreadPoolExecutor(1, thread_name_prefix="networks") if worker_thread
                        else None)  # fmt: skip
        # seconds begun, in order: (the caller's array, the worker's answer)
        self._begun: deque[tuple[np.ndarray, Future[tuple[np.ndarray, Patches]]]] = deque()
        self.reset()

    def close(self) -> None:
        """Stop the worker thread, if any."""
        if self._worker is not None:
            self._worker.shutdown()

    @property
    def cnn_delay_steps(self) -> int:
        """Steps the CNN's scores lag the mel rows given."""
        return self.cnn.delay_steps

    def reset(self) -> None:
        """Forget everything (start of a stream, or lost samples)."""
        self.cnn.reset()
        self.resampler.reset()
        self.front_end.reset()
        self._samples_16k = 0

    def begin(self, second: np.ndarray, mel_db: np.ndarray) -> None:
        """Start both networks on ``second`` and its mel rows on the worker thread; several
        seconds may be begun before :meth:`process` collects them, in the same order. Without
        a worker, nothing: :meth:`process` does it all."""
        if self._worker is not None:
            # copies: the caller's arrays may change while the worker reads them
            audio, rows = np.array(second, dtype=np.float64), np.array(mel_db)
            self._begun.append((second, self._worker.submit(self._both, audio, rows)))

    def process(self, second: np.ndarray, mel_db: np.ndarray) -> tuple[np.ndarray, Patches]:
        """CNN scores that became final (one per step, in order) and the patches completed."""
        if not self._begun:
            return self._both(second, mel_db)
        begun, answer = self._begun.popleft()
        if begun is not second:  # not the next second begun: a caller's mistake, never silent
            answer.result()
            raise RuntimeError("SensorNetworks.process: a second other than the one begun")
        return answer.result()

    def _both(self, second: np.ndarray, mel_db: np.ndarray) -> tuple[np.ndarray, Patches]:
        rows = np.asarray(mel_db, dtype=np.float16).astype(np.float32)
        scores = self.cnn.scores(rows).astype(np.float32)
        return scores, self._patches(self.resampler.process(second))

    def flush(self, pad_patches: bool) -> tuple[np.ndarray, Patches]:
        """The held-back scores (future padded with the last row) and then starts afresh.

        ``pad_patches`` (end of a recording) completes the last patches with digital silence
        as YAMNet pads a clip (``sensor.yamnet_features.pad_clip``); without it (lost samples)
        a patch still incomplete is dropped rather than filled with samples never heard.
        """
        scores = self.cnn.flush().astype(np.float32)
        if pad_patches:
            tail = self.resampler.process(np.zeros(0), last=True)
            length = max(self._samples_16k + tail.size, MIN_CLIP_SAMPLES)
            hops = math.ceil((length - MIN_CLIP_SAMPLES) / PATCH_HOP_SAMPLES)
            padding = MIN_CLIP_SAMPLES + hops * PATCH_HOP_SAMPLES - self._samples_16k - tail.size
            patches = self._patches(np.concatenate([tail, np.zeros(padding)]))
        else:
            patches = self._no_patches(self.front_end.patches_emitted)
        self.reset()
        return scores, patches

    def _no_patches(self, first: int) -> Patches:
        return Patches(first, np.zeros((0, EMBEDDING_SIZE), np.float32),
                       np.zeros((0, N_CLASSES), np.float32), np.zeros(0, np.float32),
                       np.zeros(0, np.float32) if self.yamnet.fine_tuned else None)

    def _patches(self, audio_16k: np.ndarray) -> Patches:
        first = self.front_end.patches_emitted
        self._samples_16k += audio_16k.size
        mel_patches = self.front_end.process(audio_16k)
        if len(mel_patches) == 0:
            return self._no_patches(first)
        output = self.yamnet.run(mel_patches)
        embeddings = np.asarray(output.embeddings, np.float32)
        # the head on its own input (the fine-tuned network's score travels apart, as ``dg``)
        head_scores = self.head.patch_scores(embeddings, output.scores, None)
        return Patches(first, embeddings, output.scores, head_scores,
                       self.yamnet.fine_tuned_dog_scores(output))


__all__ = ["CNN_GATE_DB", "Patches", "SensorNetworks", "TARGET_RATE_HZ", "cached_head",
           "cached_yamnet", "model_versions"]  # fmt: skip
