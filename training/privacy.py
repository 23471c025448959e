"""What the wire carries of speech, and how much of it an attacker can turn back into speech.

Issue 24, item 6 ("privacy, proven"): speech rebuilt from wire format v1's 20 ms mel frames is
intelligible (STOI 0.75), so v2 carries no fine time-frequency spectrum. This module computes
what each wire version carries for a speech clip with the project's own code, rebuilds audio
from it with signal-processing attacks (Griffin-Lim; a band-envelope vocoder) and scores the
result with STOI (Taal et al. 2011, ``pystoi``) against the original. The learned attack is in
:mod:`training.privacy_net`; the command is ``barkwatch-train privacy``
(:mod:`training.privacy_cli`).

Time grid: everything is placed on the 16 kHz sample axis of the original clip. Wire step k
(20 ms) is the mel window ending at sample 320 (k + 1), so its centre is at 320 k + 120; the
levels' step k spans [320 k, 320 (k + 1)); second j spans [16000 j, 16000 (j + 1)); YAMNet patch
i starts at 0.48 i s and lasts 0.975 s.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass

import librosa
import numpy as np

from sensor.bands import ThirdOctaveBank
from sensor.features import HOP_S, WINDOW_S, MelFeatures
from sensor.frames import FrameBuilder, mel_rows_from_samples
from sensor.scoring import SensorNetworks
from sensor.wire import GATE_DOG, Frame, decode_frame, encode_frame

log = logging.getLogger(__name__)

RATE = 16_000  # Hz: the corpus's rate and YAMNet's
FULL_SCALE_DB = 120.0  # the default calibration (README): levels only shift with it
STEP = round(HOP_S * RATE)  # 320 samples: one wire step
MEL_WINDOW = round(WINDOW_S * RATE)  # 400 samples: the mel window
# Griffin-Lim synthesis: a 25 ms window on a 5 ms hop. Interpolating the 20 ms frames onto the
# finer hop gives Griffin-Lim the overlap it needs (at the wire's own 20 ms hop, 80 samples of
# overlap, its phase estimate is poor): the attacker's best use of the frames.
SYNTH_FFT = 400
SYNTH_HOP = 80
GRIFFIN_LIM_ITERATIONS = 64
SECOND = RATE
F_TIME_CONSTANT_S = 0.125  # IEC 61672-1 time weighting F


class PrivacyError(ValueError):
    """Input the privacy attacks cannot use; the message says what and where."""


@dataclass(frozen=True)
class V1Content:
    """Wire v1's speech-bearing field: calibrated mel band levels per 20 ms (steps x 64, dB)."""

    mel_db: np.ndarray
    full_scale_db: float = FULL_SCALE_DB


@dataclass(frozen=True)
class V2Content:
    """Everything wire v2 carries that depends on the sound (levels in dB SPL).

    Per 20 ms step: ``laeq_steps_db``, ``laf_steps_db`` (LAF maximum), each step holding its
    0.5 s block's value as the wire sends them, ``dog_steps`` (the small CNN's score, 0..1).
    Per second: ``bands_db`` (seconds x bands; band ``i`` has IEC 61260-1 index
    ``band_first_index + i``). Per 0.96 s YAMNet patch, one every 0.48 s, starting
    ``patch_starts_s`` after the clip's start: ``embeddings`` (1024) and ``class_scores`` (521).
    """

    laeq_steps_db: np.ndarray
    laf_steps_db: np.ndarray
    dog_steps: np.ndarray
    band_first_index: int
    bands_db: np.ndarray
    patch_starts_s: np.ndarray
    embeddings: np.ndarray
    class_scores: np.ndarray

    @property
    def n_steps(self) -> int:
        return int(self.laeq_steps_db.size)


def checked_clip(samples: np.ndarray, what: str = "clip") -> np.ndarray:
    """``samples`` as finite mono float64 at 16 kHz of at least one step, or PrivacyError."""
    audio = np.asarray(samples, dtype=np.float64)
    if audio.ndim != 1:
        raise PrivacyError(f"{what}: expected mono samples, got shape {audio.shape}")
    if audio.size < STEP:
        raise PrivacyError(f"{what}: {audio.size} samples, shorter than one 20 ms step")
    if not np.all(np.isfinite(audio)):
        raise PrivacyError(f"{what}: holds NaN or infinite samples")
    return audio


def n_steps_of(samples: np.ndarray) -> int:
    """Whole 20 ms steps in the clip."""
    return int(np.asarray(samples).size // STEP)


def v1_content(samples: np.ndarray, full_scale_db: float = FULL_SCALE_DB) -> V1Content:
    """The mel frames wire v1 sent for a 16 kHz clip: the sensor's mel rows (float16, as v1
    carried them; ``sensor.frames.mel_rows_from_samples``, the rows its CNN now reads)."""
    audio = checked_clip(samples)
    mel = mel_rows_from_samples(audio, RATE, full_scale_db)[: n_steps_of(audio)]
    return V1Content(mel_db=np.asarray(mel, dtype=np.float64), full_scale_db=full_scale_db)


class WireV2:
    """The adapter from a clip to what wire v2 carries (:class:`V2Content`): the sensor's own
    frames (``sensor.frames``, with its CNN and YAMNet, ``sensor.scoring``), encoded and
    decoded by ``sensor.wire``, so the attacks see exactly what an analyzer receives. v2 sent
    every field of every second: v2's content is the current wire's with every frame's gate set
    to ``dog`` and YAMNet's embeddings and class scores added, rounded to float16 as v2 sent
    them (since wire v4 they stay on the sensor). ``gated``: what the current wire sends (the
    speech gate's decision, :mod:`sensor.gate`)."""

    def __init__(self, full_scale_db: float = FULL_SCALE_DB, gated: bool = False) -> None:
        self.full_scale_db = full_scale_db
        self.networks = SensorNetworks(RATE)
        self.gated = gated

    def frames(self, samples: np.ndarray) -> list[Frame]:
        """The clip's frames as the analyzer decodes them off the wire."""
        audio = checked_clip(samples)
        self.networks.reset()
        built = frames_from_samples_with(audio, self.full_scale_db, self.networks)
        if self.gated:
            return [decode_frame(encode_frame(frame)) for frame in built]
        return [dataclasses.replace(
            decode_frame(encode_frame(dataclasses.replace(frame, gate=GATE_DOG))),
            embeddings=frame.embeddings.astype(np.float16).astype(np.float32),
            class_scores=frame.class_scores.astype(np.float16).astype(np.float32))
            for frame in built]

    def content(self, samples: np.ndarray) -> V2Content:
        return content_of_frames(self.frames(samples), n_steps_of(samples))


def frames_from_samples_with(
    audio: np.ndarray, full_scale_db: float, networks: SensorNetworks
) -> list[Frame]:
    """``sensor.frames.frames_from_samples`` with shared networks (one YAMNet session)."""
    builder = FrameBuilder("privacy", RATE, full_scale_db, 0, networks=networks)
    frames = []
    for start in range(0, audio.size, RATE):
        frames += builder.push(audio[start : start + RATE])
    return frames + builder.finish()


def content_of_frames(frames: list[Frame], n_steps: int) -> V2Content:
    """The sound-dependent fields of decoded v2 frames, joined in capture order; the step
    series cut to ``n_steps`` (the padding of the last second dropped)."""
    if not frames:
        raise PrivacyError("no frames: the clip is shorter than one frame")
    start_ns = frames[0].capture_ns
    starts = np.concatenate([frame.patch_starts_ns for frame in frames])
    return V2Content(
        laeq_steps_db=np.concatenate([f.laeq_steps_db for f in frames])[:n_steps].astype(float),
        laf_steps_db=np.concatenate([f.laf_steps_db for f in frames])[:n_steps].astype(float),
        dog_steps=np.concatenate([f.dog_steps for f in frames])[:n_steps].astype(float),
        band_first_index=next((f.band_first_index for f in frames if len(f.bands_db)),
                              frames[0].band_first_index),
        bands_db=np.stack([_bands_or_flat(f, frames) for f in frames]).astype(float),
        patch_starts_s=(starts - start_ns).astype(float) / 1e9,
        embeddings=np.concatenate([f.embeddings for f in frames]).astype(float),
        class_scores=np.concatenate([f.class_scores for f in frames]).astype(float),
    )


def _bands_or_flat(frame: Frame, frames: list[Frame]) -> np.ndarray:
    """The frame's bands; a second the speech gate sent without them gets the attacker's best
    guess from what it did carry: its LAeq spread evenly over the bands."""
    if len(frame.bands_db):
        return frame.bands_db
    n = max((len(f.bands_db) for f in frames), default=0) or _bands_at(frame.sample_rate)
    return np.full(n, frame.laeq_db - 10.0 * np.log10(n), np.float32)


@functools.lru_cache(maxsize=4)
def _bands_at(rate: int) -> int:
    """How many third-octave bands the sensor measures at ``rate`` (a clip's frames may all
    have gone without them: every clip's content then has the same width)."""
    return len(ThirdOctaveBank(rate, FULL_SCALE_DB).band_indices)


# ---- synthesis ---------------------------------------------------------------------------


def power_to_audio(
    power: np.ndarray, centres: np.ndarray, n_samples: int, seed: int = 0,
    iterations: int = GRIFFIN_LIM_ITERATIONS, hop: int = SYNTH_HOP,
) -> np.ndarray:  # fmt: skip
    """Audio whose short-time power spectrum follows ``power`` (frames x 201 bins of a
    400-point FFT at 16 kHz), frame f centred at sample ``centres[f]``: log power interpolated
    onto a grid of ``hop`` samples (5 ms), then Griffin-Lim (librosa, seeded random initial
    phase)."""
    grid = np.arange(0, n_samples + hop, hop)
    log_power = np.log(np.maximum(power, 1e-30))
    fine = np.stack([np.interp(grid, centres, band) for band in log_power.T])
    magnitude = np.exp(0.5 * fine)
    audio = librosa.griffinlim(
        magnitude, n_iter=iterations, hop_length=hop, win_length=MEL_WINDOW,
        n_fft=SYNTH_FFT, center=True, init="random", random_state=seed,
    )  # fmt: skip
    out = np.zeros(n_samples)
    out[: min(n_samples, audio.size)] = audio[:n_samples]
    return out


def mel_step_centres(n_steps: int) -> np.ndarray:
    """Sample index of the centre of every 20 ms mel window (window k ends at 320 (k + 1))."""
    return (np.arange(n_steps) + 1) * STEP - MEL_WINDOW / 2


def mel_to_power(mel_db: np.ndarray, full_scale_db: float = FULL_SCALE_DB) -> np.ndarray:
    """Per-bin power (steps x 201) whose mel bands give ``mel_db``: the inverse of
    ``sensor.features.MelFeatures`` by non-negative least squares (``librosa.util.nnls``)."""
    mel = MelFeatures(RATE, full_scale_db)
    band_power = 10.0 ** ((np.asarray(mel_db, dtype=np.float64) - full_scale_db) / 10.0)
    basis = mel.mel_basis[:, : SYNTH_FFT // 2 + 1]
    psd = librosa.util.nnls(basis, band_power.T / (mel.psd_scale * mel.bin_hz)).T
    return np.asarray(np.maximum(psd, 1e-30))


def rebuild_from_mel(
    mel_db: np.ndarray, n_samples: int, full_scale_db: float = FULL_SCALE_DB, seed: int = 0,
    hop: int = SYNTH_HOP,
) -> np.ndarray:  # fmt: skip
    """Griffin-Lim from 20 ms mel frames (wire v1's ``mel``, or a learned attack's output);
    ``hop=STEP`` runs it on the frames' own 20 ms hop (the issue's baseline)."""
    power = mel_to_power(mel_db, full_scale_db)
    return power_to_audio(power, mel_step_centres(len(power)), n_samples, seed, hop=hop)


def band_edges_hz(first_index: int, n_bands: int) -> np.ndarray:
    """Lower and upper edges (n_bands x 2) of IEC 61260-1 base-10 one-third-octave bands."""
    centres = 1000.0 * 10.0 ** ((first_index + np.arange(n_bands)) / 10.0)
    return np.stack([centres * 10.0 ** (-0.05), centres * 10.0**0.05], axis=1)


def bands_to_power(bands_db: np.ndarray, first_index: int) -> np.ndarray:
    """Per-bin power (rows x 201) spreading each band's power evenly over its FFT bins."""
    bands = np.atleast_2d(np.asarray(bands_db, dtype=np.float64))
    freqs = np.fft.rfftfreq(SYNTH_FFT, 1.0 / RATE)
    edges = band_edges_hz(first_index, bands.shape[1])
    member = (freqs[None, :] >= edges[:, :1]) & (freqs[None, :] < edges[:, 1:])
    counts = np.maximum(member.sum(axis=1), 1)
    band_power = 10.0 ** (bands / 10.0) / counts
    return np.asarray(band_power @ member.astype(np.float64) + 1e-30)


def rebuild_from_bands(content: V2Content, n_samples: int, seed: int = 0) -> np.ndarray:
    """Griffin-Lim from the per-second third-octave bands alone (no time envelope)."""
    power = bands_to_power(content.bands_db, content.band_first_index)
    centres = np.arange(len(power)) * SECOND + SECOND / 2
    return power_to_audio(power, centres, n_samples, seed)


def envelope_power(
    content: V2Content, envelope_db: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The band-envelope vocoder's spectrogram: each second's band spectrum (interpolated
    between seconds) shaped by the 20 ms envelope, so that every second keeps its energy.

    ``envelope_db`` defaults to ``laeq_steps_db``. Returns (steps x 201 power, centres).
    """
    envelope = content.laeq_steps_db if envelope_db is None else envelope_db
    n = envelope.size
    centres = np.arange(n) * STEP + STEP / 2
    spectra = bands_to_power(content.bands_db, content.band_first_index)
    second_centres = np.arange(len(spectra)) * SECOND + SECOND / 2
    log_spectra = np.log(spectra)
    shape = np.exp(np.stack([np.interp(centres, second_centres, b) for b in log_spectra.T], 1))
    step_power = 10.0 ** (envelope / 10.0)
    per_second = np.arange(n) // (SECOND // STEP)
    mean_power = np.bincount(per_second, step_power) / np.bincount(per_second)
    gain = step_power / mean_power[per_second]
    return shape * gain[:, None], centres


def rebuild_from_envelope(
    content: V2Content, n_samples: int, seed: int = 0, envelope_db: np.ndarray | None = None
) -> np.ndarray:
    """The band-envelope vocoder: per-second bands shaped by the 20 ms envelope, Griffin-Lim."""
    power, centres = envelope_power(content, envelope_db)
    return power_to_audio(power, centres, n_samples, seed)


def coarsened(values_db: np.ndarray, steps: int) -> np.ndarray:
    """The envelope as a wire that averaged (in power) over ``steps`` 20 ms steps would carry
    it, held over those steps: what an attacker gets if the field is coarsened."""
    values = np.asarray(values_db, dtype=np.float64)
    if steps <= 1:
        return values
    groups = np.arange(values.size) // steps
    power = np.bincount(groups, 10.0 ** (values / 10.0)) / np.bincount(groups)
    return np.asarray(10.0 * np.log10(power)[groups])


def laf_deconvolved(laf_steps_db: np.ndarray) -> np.ndarray:
    """The 20 ms energy envelope recovered from ``laf_s`` by undoing the F time weighting
    (IEC 61672-1: exponential, time constant 125 ms): e[k] = (E[k] - a E[k-1]) / (1 - a),
    a = exp(-20 ms / 125 ms). What an attacker makes of the F-weighted series."""
    energy = 10.0 ** (np.asarray(laf_steps_db, dtype=np.float64) / 10.0)
    decay = np.exp(-HOP_S / F_TIME_CONSTANT_S)
    raw = (energy[1:] - decay * energy[:-1]) / (1.0 - decay)
    floor = energy.max() * 1e-6  # 60 dB under the loudest step: the recovery's noise
    return np.asarray(10.0 * np.log10(np.maximum(np.concatenate([energy[:1], raw]), floor)))


def long_term_power(content: V2Content) -> tuple[np.ndarray, np.ndarray]:
    """The clip's long-term spectrum (its bands' power averaged over all seconds), held over
    the clip: stationary noise that carries nothing of the clip's time course (a reference)."""
    spectra = bands_to_power(content.bands_db, content.band_first_index)
    centres = np.arange(len(spectra)) * SECOND + SECOND / 2
    return np.repeat(spectra.mean(axis=0, keepdims=True), len(spectra), axis=0), centres


def stoi(original: np.ndarray, rebuilt: np.ndarray, extended: bool = False) -> float:
    """Short-time objective intelligibility of ``rebuilt`` against ``original`` (Taal et al.
    2011), or with ``extended`` ESTOI (Jensen and Taal 2016), which also counts how the
    bands move together and scores sound carrying nothing of the original near 0."""
    from pystoi import stoi as pystoi_stoi  # dev extra; imported when a score is asked for

    n = min(original.size, rebuilt.size)
    return float(pystoi_stoi(original[:n], rebuilt[:n], RATE, extended=extended))
