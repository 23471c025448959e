"""Turn a stream of audio samples into one-second frames of levels, bands and features.

This is the one place that cuts the stream into frames and stamps capture time: the live
sensor, file replay, offline analysis and classifier training all go through it, so their
numbers cannot drift apart. Capture time comes from the sample count and the stream's start,
never from the clock at the moment a block happens to be processed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np

from sensor.bands import ThirdOctaveBank
from sensor.errors import AudioInputError
from sensor.features import HOP_S, MelFeatures
from sensor.levels import LevelMeter
from sensor.wire import SUPPORTED_SAMPLE_RATES, Frame

log = logging.getLogger(__name__)

CLASS_1_SAMPLE_RATES = (44100, 48000)


class FrameBuilder:
    """Accumulates samples and emits a :class:`Frame` for every complete second.

    ``push`` may be called with blocks of any length; frames are identical however the
    stream is split. ``skip`` records lost samples (a dropped capture block): the partial
    frame is discarded and capture time moves on by the samples lost.
    """

    def __init__(
        self,
        device_id: str,
        sample_rate: int,
        full_scale_db: float,
        start_ns: int,
        first_seq: int = 0,
        calibration_date: str = "",
    ) -> None:
        if sample_rate not in SUPPORTED_SAMPLE_RATES:
            raise AudioInputError(
                f"sample rate {sample_rate} Hz is not supported; use one of "
                f"{', '.join(map(str, SUPPORTED_SAMPLE_RATES))} Hz"
            )
        if sample_rate not in CLASS_1_SAMPLE_RATES:
            log.warning(
                "measuring at %d Hz: A-weighting cannot meet IEC 61672-1 class 1 (or class 2 "
                "at 16 kHz) near the top of the range; deployments capture at 48 kHz",
                sample_rate,
            )
        self.device_id = device_id
        self.sample_rate = sample_rate
        self.full_scale_db = full_scale_db
        self.calibration_date = calibration_date
        self.start_ns = start_ns
        self.next_seq = first_seq
        self.hop = round(HOP_S * sample_rate)
        self.meter = LevelMeter(sample_rate, full_scale_db)
        self.bank = ThirdOctaveBank(sample_rate, full_scale_db)
        self.mel = MelFeatures(sample_rate, full_scale_db)
        self._pending: list[np.ndarray] = []
        self._pending_len = 0
        self._frame_start_sample = 0

    @property
    def samples_seen(self) -> int:
        """Samples consumed or skipped since the stream started."""
        return self._frame_start_sample + self._pending_len

    def push(self, samples: np.ndarray) -> list[Frame]:
        """Add mono samples in [-1, 1]; return the frames they complete."""
        block = np.asarray(samples, dtype=np.float64).reshape(-1)
        frames: list[Frame] = []
        while block.size:
            need = self.sample_rate - self._pending_len
            take, block = block[:need], block[need:]
            self._pending.append(take)
            self._pending_len += take.size
            if self._pending_len == self.sample_rate:
                second = np.concatenate(self._pending)
                self._pending, self._pending_len = [], 0
                frames.append(self._measure(second))
                self._frame_start_sample += self.sample_rate
        return frames

    def finish(self) -> list[Frame]:
        """Measure a trailing partial second padded with digital silence (offline analysis).

        The padded frame keeps the full one-second length, so its Leq values include the
        silence; a live sensor never calls this and drops a partial second at shutdown.
        """
        if self._pending_len == 0:
            return []
        return self.push(np.zeros(self.sample_rate - self._pending_len))

    def skip(self, n_samples: int) -> None:
        """Record ``n_samples`` lost samples: drop the partial frame, restart the filters."""
        self._frame_start_sample += self._pending_len + n_samples
        self._pending, self._pending_len = [], 0
        self.meter.reset()
        self.bank.reset()
        self.mel.reset()

    def _measure(self, second: np.ndarray) -> Frame:
        levels, laeq_steps, laf_steps = self.meter.process_steps(second, self.hop)
        bands_db = self.bank.process(second)
        mel_db = self.mel.process(second)
        capture_ns = self.start_ns + round(self._frame_start_sample * 1e9 / self.sample_rate)
        frame = Frame(
            device_id=self.device_id,
            seq=self.next_seq,
            capture_ns=capture_ns,
            sample_rate=self.sample_rate,
            n_samples=second.size,
            full_scale_db=self.full_scale_db,
            calibration_date=self.calibration_date,
            laeq_db=levels.laeq_db,
            lceq_db=levels.lceq_db,
            lzeq_db=levels.lzeq_db,
            lafmax_db=levels.lafmax_db,
            clipped_samples=levels.clipped_samples,
            band_first_index=int(self.bank.band_indices[0]),
            bands_db=np.asarray(bands_db, dtype=np.float32),
            hop_s=HOP_S,
            laeq_steps_db=laeq_steps.astype(np.float32),
            laf_steps_db=laf_steps.astype(np.float32),
            mel_db=mel_db,
        )
        self.next_seq += 1
        return frame


def frames_from_samples(
    samples: np.ndarray,
    sample_rate: int,
    full_scale_db: float,
    device_id: str = "offline",
    start_ns: int = 0,
) -> Iterator[Frame]:
    """Frames of a whole in-memory signal; a trailing partial second is padded with silence."""
    builder = FrameBuilder(device_id, sample_rate, full_scale_db, start_ns)
    for start in range(0, samples.shape[0], sample_rate):
        yield from builder.push(samples[start : start + sample_rate])
    yield from builder.finish()
