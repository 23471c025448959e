"""Turn a stream of audio samples into one-second frames of levels, bands and dog scores.

This is the one place that cuts the stream into frames and stamps capture time: the live
sensor, file replay, offline analysis and classifier training all go through it, so their
numbers cannot drift apart. Capture time comes from the sample count and the stream's start,
never from the clock at the moment a block happens to be processed.

Wire v2 (issue 24): the mel rows feed the small CNN here and never leave; a frame carries the
CNN's score per 20 ms step and YAMNet's patches (:mod:`sensor.scoring`). The CNN looks 0.64 s
ahead, so a second's frame is complete one second later: the builder holds it back until then
(``finish`` and ``skip`` hand over what it holds). The LAeq and LAF envelopes leave in 0.5 s
blocks (:func:`envelope_blocks`): at 20 ms they carried speech's rhythm (docs/PRIVACY.md).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sensor.array import ArraySettings
from sensor.bands import ThirdOctaveBank
from sensor.bearing import BearingStage
from sensor.errors import AudioInputError
from sensor.features import HOP_S, MelFeatures
from sensor.gate import GateSettings, SpeechGate
from sensor.kernels import sosfilt
from sensor.levels import LevelMeter
from sensor.scoring import Patches, SensorNetworks
from sensor.wire import (
    EMBEDDING_SIZE,
    ENVELOPE_HOP_S,
    N_CLASSES,
    PATCH_HOP_NS,
    SUPPORTED_SAMPLE_RATES,
    Frame,
)

log = logging.getLogger(__name__)

CLASS_1_SAMPLE_RATES = (44100, 48000)
DC_BLOCK_CUTOFF_HZ = 1.0  # first-order high-pass: -0.04 dB at 10 Hz, the Z range's low end


@dataclass(frozen=True)
class MeasurementOptions:
    """How a frame's derived values are computed (sensor configuration ``[measurement]``).

    ``percentile_window_s``: LAF10/50/90 cover the LAF samples (one per 20 ms) of this many
    seconds ending with the frame (ISO 1996-1 exceedance levels, F time weighting).
    ``noise_floor_dba``: the microphone chain's self-noise, A-weighted dB SPL; a frame whose
    LAeq is within ``under_range_margin_db`` of it is flagged under-range (None: no flag).
    """

    percentile_window_s: float = 60.0
    noise_floor_dba: float | None = None
    under_range_margin_db: float = 5.0


def envelope_blocks(
    laeq_steps_db: np.ndarray, lafmax_steps_db: np.ndarray, steps_per_block: int
) -> tuple[np.ndarray, np.ndarray]:
    """The wire's envelopes from per-step levels: per block of ``steps_per_block`` steps (the
    last may be shorter), LAeq as the power mean of its steps' LAeq (equal steps: IEC 61672-1's
    Leq over the block) and LAF as the maximum of its steps' LAF maxima (the block's LAFmax,
    so the frame's and an event's LAFmax stay exact). dB in, dB out (float64)."""
    if steps_per_block < 1:
        raise ValueError(f"steps_per_block {steps_per_block} must be at least 1")
    laeq = np.asarray(laeq_steps_db, dtype=np.float64)
    lafmax = np.asarray(lafmax_steps_db, dtype=np.float64)
    if laeq.shape != lafmax.shape or laeq.ndim != 1:
        raise ValueError(f"step series of shapes {laeq.shape} and {lafmax.shape} must be one "
                         "equal length")
    starts = np.arange(0, laeq.size, steps_per_block)
    if not starts.size:
        return np.zeros(0), np.zeros(0)
    groups = np.arange(laeq.size) // steps_per_block
    power = np.bincount(groups, 10.0 ** (laeq / 10.0)) / np.bincount(groups)
    return 10.0 * np.log10(power), np.maximum.reduceat(lafmax, starts)


class _DcBlocker:
    """Stateful first-order DC-blocking high-pass; reports the DC it removed."""

    def __init__(self, sample_rate: int) -> None:
        pole = math.exp(-2.0 * math.pi * DC_BLOCK_CUTOFF_HZ / sample_rate)
        gain = (1.0 + pole) / 2.0  # unity gain at Nyquist
        self.sos = np.array([[gain, -gain, 0.0, 1.0, -pole, 0.0]])
        self.zi = np.zeros((1, 2))

    def reset(self) -> None:
        self.zi = np.zeros((1, 2))

    def process(self, block: np.ndarray) -> np.ndarray:
        return sosfilt(self.sos, block, self.zi)


class _PercentileWindow:
    """Ring of the most recent LAF samples for exceedance levels."""

    def __init__(self, capacity: int) -> None:
        self.values = np.zeros(max(1, capacity))
        self.filled = 0
        self.position = 0

    def reset(self) -> None:
        self.filled = self.position = 0

    def add(self, samples: np.ndarray) -> None:
        size = self.values.size
        newest = np.asarray(samples)[-size:]
        slots = (self.position + np.arange(newest.size)) % size
        self.values[slots] = newest
        self.position = int((self.position + newest.size) % size)
        self.filled = min(size, self.filled + newest.size)

    def exceedance_db(self) -> tuple[float, float, float]:
        """(L10, L50, L90): levels exceeded 10, 50 and 90 % of the time."""
        l10, l50, l90 = np.percentile(self.values[: self.filled], [90.0, 50.0, 10.0])
        return float(l10), float(l50), float(l90)


class FrameBuilder:
    """Accumulates samples and emits a :class:`Frame` for every complete second.

    ``push`` may be called with blocks of any length; frames are identical however the
    stream is split. A second's frame comes out once the CNN has scored all its steps (with
    the next second). ``skip`` records lost samples (a dropped capture block): the frames held
    are completed as at the end of a stream and returned, the partial second is discarded and
    capture time moves on by the samples lost. ``networks`` may be shared set-up (tests).
    Each frame comes with its speech gate decided (:mod:`sensor.gate`, ``gate``: its
    thresholds): what it will carry on the wire; in memory it keeps everything. The gate
    looks one second ahead, so a frame comes out a second after the CNN has scored it.
    With a microphone array (``array`` that can bear), every block comes with all its input
    channels (``push(samples, channels)``) and each dog frame with its bearing
    (:mod:`sensor.bearing`); the levels and scores are still those of ``samples`` alone.
    """

    def __init__(
        self,
        device_id: str,
        sample_rate: int,
        full_scale_db: float,
        start_ns: int,
        first_seq: int = 0,
        calibration_date: str = "",
        options: MeasurementOptions | None = None,
        networks: SensorNetworks | None = None,
        gate: GateSettings | None = None,
        array: ArraySettings | None = None,
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
        self.options = options or MeasurementOptions()
        self.dc_blocker = _DcBlocker(sample_rate)
        self.percentiles = _PercentileWindow(round(self.options.percentile_window_s / HOP_S))
        self.meter = LevelMeter(sample_rate, full_scale_db)
        self.bank = ThirdOctaveBank(sample_rate, full_scale_db)
        self.mel = MelFeatures(sample_rate, full_scale_db)
        self.networks = networks or SensorNetworks(sample_rate)
        yamnet = self.networks.yamnet
        self.gate = SpeechGate(yamnet.class_names, yamnet.dog_indices, gate,
                               head=self.networks.head)
        self.bearings = (BearingStage(array, sample_rate) if array is not None and array.can_bear
                         else None)
        # measured, waiting for their dog scores; each with its number of 20 ms steps
        self._held: deque[tuple[Frame, int]] = deque()
        self._scores = np.zeros(0, dtype=np.float32)  # final CNN scores not yet in a frame
        self._patches: list[Patches] = []  # YAMNet patches not yet in a frame
        self._segment_start_sample = 0  # where the networks' stream began (start, or a gap)
        self._pending: list[np.ndarray] = []
        self._pending_len = 0
        self._frame_start_sample = 0

    @property
    def samples_seen(self) -> int:
        """Samples consumed or skipped since the stream started."""
        return self._frame_start_sample + self._pending_len

    def push(self, samples: np.ndarray, channels: np.ndarray | None = None) -> list[Frame]:
        """Add mono samples in [-1, 1] (with an array, ``channels``: the same samples on every
        input channel, (samples, channels)); return the frames they complete."""
        block = np.asarray(samples, dtype=np.float64).reshape(-1)
        if self.bearings is not None:
            self.bearings.push(channels, block.size)
        seconds = []
        while block.size:
            need = self.sample_rate - self._pending_len
            take, block = block[:need], block[need:]
            self._pending.append(take)
            self._pending_len += take.size
            if self._pending_len == self.sample_rate:
                seconds.append(np.concatenate(self._pending))
                self._pending, self._pending_len = [], 0
        # DC removal, mel rows and the networks' start for every whole second first: with a
        # worker thread (offline analysis) the networks run through them while they are measured
        started = [self._start(raw) for raw in seconds]
        frames: list[Frame] = []
        for raw, (second, mel_db) in zip(seconds, started, strict=True):
            frames.extend(self._measure(raw, second, mel_db))
            self._frame_start_sample += self.sample_rate
        return self._with_bearings(frames)

    def _with_bearings(self, frames: list[Frame]) -> list[Frame]:
        if self.bearings is None:
            return frames
        return self.bearings.annotate(frames, self.start_ns)

    def finish(self) -> list[Frame]:
        """Measure a trailing partial second padded with digital silence (offline analysis).

        The padded frame keeps the full one-second length, so its Leq values include the
        silence; a live sensor never calls this and drops a partial second at shutdown. The
        frames held come out too, the last patches completed with silence as YAMNet pads a
        clip.
        """
        frames = []
        if self._pending_len:
            padding = self.sample_rate - self._pending_len
            frames = self.push(np.zeros(padding), None if self.bearings is None else
                               np.zeros((padding, self.bearings.ring.channels), np.float32))
        return frames + self._with_bearings(self._flush_networks(pad_patches=True))

    def skip(self, n_samples: int) -> list[Frame]:
        """Record ``n_samples`` lost samples: return the frames held (their last steps scored
        against copies of the last row, incomplete patches dropped), drop the partial second,
        restart the filters and the networks."""
        frames = self._with_bearings(self._flush_networks(pad_patches=False))
        if self.bearings is not None:
            self.bearings.skip(n_samples)
        self._frame_start_sample += self._pending_len + n_samples
        self._segment_start_sample = self._frame_start_sample
        self._pending, self._pending_len = [], 0
        self.dc_blocker.reset()
        self.percentiles.reset()
        self.meter.reset()
        self.bank.reset()
        self.mel.reset()
        return frames

    def _flush_networks(self, pad_patches: bool) -> list[Frame]:
        scores, patches = self.networks.flush(pad_patches)
        self._scores = np.concatenate([self._scores, scores])
        self._patches.append(patches)
        frames = self.gate.push(self._completed()) + self.gate.flush()
        self._scores = np.zeros(0, dtype=np.float32)
        self._patches = []
        return frames

    def _completed(self) -> list[Frame]:
        """Held frames whose steps all have scores, each with the patches completed so far."""
        frames = []
        while self._held and self._scores.size >= self._held[0][1]:
            frame, n = self._held.popleft()
            dog_steps, self._scores = self._scores[:n], self._scores[n:]
            patches, self._patches = [p for p in self._patches if len(p)], []
            frames.append(self._with_scores(frame, dog_steps, patches))
        return frames

    def _with_scores(self, frame: Frame, dog_steps: np.ndarray, patches: list[Patches]) -> Frame:
        if patches:
            first = patches[0].first
            embeddings = np.concatenate([p.embeddings for p in patches])
            class_scores = np.concatenate([p.class_scores for p in patches])
            head_scores = np.concatenate([p.head_scores for p in patches])
            tuned = [p.dog_scores for p in patches if p.dog_scores is not None]
            dog_scores: np.ndarray | None = (np.concatenate(tuned) if len(tuned) == len(patches)
                                             else None)
        else:
            first = 0
            embeddings = np.zeros((0, EMBEDDING_SIZE), np.float32)
            class_scores = np.zeros((0, N_CLASSES), np.float32)
            head_scores = np.zeros(0, np.float32)
            dog_scores = np.zeros(0, np.float32) if self.networks.yamnet.fine_tuned else None
        segment_ns = self.start_ns + round(self._segment_start_sample * 1e9 / self.sample_rate)
        return dataclasses.replace(
            frame,
            dog_steps=np.clip(dog_steps, 0.0, 1.0).astype(np.float32),
            patch_start_ns=segment_ns + first * PATCH_HOP_NS if patches else frame.capture_ns,
            embeddings=embeddings,
            class_scores=class_scores,
            patch_head_scores=np.clip(head_scores, 0.0, 1.0).astype(np.float32),
            patch_dog_scores=dog_scores,
        )

    def _start(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """DC removal and mel rows of a second, and the networks started on them."""
        second = self.dc_blocker.process(raw)
        mel_db = self.mel.process(second)
        self.networks.begin(second, mel_db)  # on a worker thread, if any, while we measure
        return second, mel_db

    def _measure(self, raw: np.ndarray, second: np.ndarray, mel_db: np.ndarray) -> list[Frame]:
        dc_offset = float(np.mean(raw))
        levels, steps = self.meter.process_steps(second, self.hop)
        self.percentiles.add(steps.laf_db)
        laf10, laf50, laf90 = self.percentiles.exceedance_db()
        bands_db = self.bank.process(second)
        scores, patches = self.networks.process(second, mel_db)
        self._scores = np.concatenate([self._scores, scores])
        self._patches.append(patches)
        capture_ns = self.start_ns + round(self._frame_start_sample * 1e9 / self.sample_rate)
        floor = self.options.noise_floor_dba
        margin = self.options.under_range_margin_db
        under_range = floor is not None and levels.laeq_db < floor + margin
        laeq_blocks, laf_blocks = envelope_blocks(
            steps.laeq_db, steps.lafmax_db, round(ENVELOPE_HOP_S / HOP_S)
        )
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
            lafmin_db=levels.lafmin_db,
            lasmax_db=levels.lasmax_db,
            laf10_db=laf10,
            laf50_db=laf50,
            laf90_db=laf90,
            percentile_window_s=self.percentiles.filled * HOP_S,
            clipped_samples=int(np.count_nonzero(np.abs(raw) >= self.meter.clip_threshold)),
            dc_offset=dc_offset,
            under_range=under_range,
            band_first_index=int(self.bank.band_indices[0]),
            bands_db=np.asarray(bands_db, dtype=np.float32),
            hop_s=HOP_S,
            envelope_hop_s=ENVELOPE_HOP_S,
            laeq_blocks_db=laeq_blocks.astype(np.float32),
            laf_blocks_db=laf_blocks.astype(np.float32),
            dog_steps=np.zeros(0, np.float32),  # until the CNN has seen the next second
            patch_start_ns=capture_ns,
            embeddings=np.zeros((0, EMBEDDING_SIZE), np.float32),
            class_scores=np.zeros((0, N_CLASSES), np.float32),
            patch_head_scores=np.zeros(0, np.float32),
            model_versions=self.networks.versions,
        )
        self.next_seq += 1
        self._held.append((frame, steps.laeq_db.size))
        return self.gate.push(self._completed())


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


def mel_rows_from_samples(
    samples: np.ndarray, sample_rate: int, full_scale_db: float
) -> np.ndarray:
    """The mel rows (steps x 64, float16) the sensor's CNN reads for a whole signal, a trailing
    partial second padded with silence: the same DC removal and mel features as
    :class:`FrameBuilder` (training makes the CNN's examples with it)."""
    dc_blocker = _DcBlocker(sample_rate)
    mel = MelFeatures(sample_rate, full_scale_db)
    rows = []
    for start in range(0, samples.shape[0], sample_rate):
        second = np.zeros(sample_rate)
        block = np.asarray(samples[start : start + sample_rate], dtype=np.float64).reshape(-1)
        second[: block.size] = block
        rows.append(mel.process(dc_blocker.process(second)))
    if not rows:
        return np.zeros((0, mel.n_mels), np.float16)
    return np.concatenate(rows).astype(np.float16)
