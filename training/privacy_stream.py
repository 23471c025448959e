"""Spoken utterances in a continuous stream, as a deployed sensor hears them (issue 34, item 3).

The word and voice attacks (:mod:`training.privacy_attacks`) read what the wire carries of
speech that a sensor picked up in the street, not of a clip handed to it alone. This module
lays the corpus's utterances one after another into one stream at the capture rate (48 kHz):

- each utterance gets a slot of whole seconds, ``2 + ceil(duration)`` long; it starts at a
  random offset inside the slot's second second (``1 + U[0, 1)`` s into the slot), so one
  second of floor leads it and at least one trails it, and no other utterance shares its frames
  or the YAMNet patches around it; a second of floor ends the stream;
- the order of the utterances is shuffled; order and offsets come from ``seed``;
- each utterance is scaled so that its LAeq over its own duration is ``speech_db`` (dB SPL,
  A-weighted; 70 dB is raised conversation at 1 m), over a continuous floor of pink noise
  (power falling 3 dB per octave, the usual stand-in for a residential background) whose LAeq
  is ``floor_db`` (35 dB: a quiet night; 45 dB: a suburban day);
- levels are calibrated as the sensor reads them: an RMS of digital full scale is
  ``full_scale_db`` dB SPL (120 dB, the README's default calibration).

The stream comes out one second at a time (a 2.5-hour stream does not fit in memory at 48 kHz)
and is the same for the same seed, utterances and conditions. Pure numpy and scipy; the levels
are computed here from IEC 61672-1's A-weighting curve in the frequency domain, independently
of the sensor's filters (the test compares the two).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import soundfile
from scipy.signal import lfilter, resample_poly

CAPTURE_RATE = 48_000  # Hz: what deployed sensors capture at (README)
FULL_SCALE_DB = 120.0  # dB SPL of an RMS of full scale: the default calibration
LEAD_S = 1  # whole seconds of floor before each utterance's second
TRAIL_S = 1  # a second of floor after the last slot: the last utterance's windows end in it
# Paul Kellet's -3 dB/octave filter (the "economy" pink-noise filter, accurate to about
# 0.05 dB from 9 Hz to Nyquist at 44.1 kHz): white noise through it is pink.
PINK_B = np.array([0.049922035, -0.095993537, 0.050612699, -0.004408786])
PINK_A = np.array([1.0, -2.494956002, 2.017265875, -0.522189400])
CALIBRATION_S = 20  # seconds of pink noise the floor's gain is computed on


class StreamError(ValueError):
    """Utterances or conditions a stream cannot be built from; the message says which."""


@dataclass(frozen=True)
class Utterance:
    """One spoken clip: its samples (mono float64 at ``rate``) and labels.

    ``word``: what was said (a digit, a called phrase); ``speaker``: who said it;
    ``session``: the recording it comes from, where the corpus says (else the speaker)."""

    clip_id: str
    word: str
    speaker: str
    session: str
    samples: np.ndarray
    rate: int


@dataclass(frozen=True)
class StreamConditions:
    """How loud the speech and the floor are (dB SPL, A-weighted LAeq) and the stream's
    rate, calibration and seed; ``floor_db`` None: no floor (digital silence, for tests)."""

    speech_db: float = 70.0
    floor_db: float | None = 35.0
    rate: int = CAPTURE_RATE
    full_scale_db: float = FULL_SCALE_DB
    seed: int = 1

    def __post_init__(self) -> None:
        for name in ("speech_db", "full_scale_db"):
            if not math.isfinite(getattr(self, name)):
                raise StreamError(f"{name}: {getattr(self, name)!r} is not a finite level")
        if self.floor_db is not None and not math.isfinite(self.floor_db):
            raise StreamError(f"floor_db: {self.floor_db!r} is not a finite level")
        if self.speech_db >= self.full_scale_db - 10.0:
            raise StreamError(f"speech_db {self.speech_db} dB: within 10 dB of full scale "
                              f"({self.full_scale_db} dB) the peaks would clip")
        if self.rate <= 0:
            raise StreamError(f"rate {self.rate} Hz must be positive")


@dataclass(frozen=True)
class Placement:
    """Where utterance ``index`` (of the list given to :func:`plan_stream`) lies in the stream:
    its first sample at ``onset_sample`` (``onset_s`` seconds), ``n_samples`` long, inside
    the slot of whole seconds starting at ``slot_start_s``."""

    index: int
    slot_start_s: int
    slot_s: int
    onset_sample: int
    n_samples: int
    rate: int

    @property
    def onset_s(self) -> float:
        return self.onset_sample / self.rate

    @property
    def duration_s(self) -> float:
        return self.n_samples / self.rate


def read_words(corpus: Path, limit: int = 0) -> list[Utterance]:
    """The spoken digits of ``corpus`` (``words/``: the Free Spoken Digit Dataset's manifest,
    columns ``clip_id``, ``word``, ``speaker``, ``file``), in manifest order; ``limit``: about
    that many, every k-th (all speakers and words kept). No sessions are recorded: each
    speaker's session is the speaker."""
    rows = _manifest_rows(corpus, ("clip_id", "word", "speaker", "file"))
    rows = _thinned(rows, limit)
    return [_utterance(corpus, row, row["word"], row["speaker"], row["speaker"]) for row in rows]


def read_voices(corpus: Path, voice_prefix: str, limit: int = 0) -> list[Utterance]:
    """The speech clips of ``corpus`` (``extra/``'s manifest: ``label`` speech, ``group`` the
    voice) whose voice starts with ``voice_prefix`` (``kajongg:``: one game's called phrases,
    eight voices through one channel); the word is the file's stem (the phrase called)."""
    rows = [row for row in _manifest_rows(corpus, ("clip_id", "label", "group", "file"))
            if row["label"] == "speech" and row["group"].startswith(voice_prefix)]  # fmt: skip
    if not rows:
        raise StreamError(f"{corpus}/manifest.csv: no speech clip of a voice starting with "
                          f"{voice_prefix!r}")  # fmt: skip
    rows = _thinned(rows, limit)
    return [_utterance(corpus, row, _phrase(row), row["group"], row["group"]) for row in rows]


def _manifest_rows(corpus: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    path = corpus / "manifest.csv"
    if not path.is_file():
        raise StreamError(f"{path} not found")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise StreamError(f"{path}: no column(s) {', '.join(missing)}")
        return list(reader)


def _thinned(rows: list[dict[str, str]], limit: int) -> list[dict[str, str]]:
    if limit < 0:
        raise StreamError(f"limit {limit}: must be 0 (all) or more")
    return rows[:: max(1, len(rows) // limit)][:limit] if limit else rows


def _phrase(row: dict[str, str]) -> str:
    return PurePosixPath(row.get("path_in_repo") or row["file"]).stem


def _utterance(corpus: Path, row: dict[str, str], word: str, speaker: str,
               session: str) -> Utterance:  # fmt: skip
    audio, rate = soundfile.read(corpus / row["file"], dtype="float64", always_2d=True)
    return Utterance(row["clip_id"], word, speaker, session, audio.mean(axis=1), int(rate))


def a_weighting_db(frequency_hz: np.ndarray) -> np.ndarray:
    """IEC 61672-1 A-weighting (dB, 0 at 1 kHz) at each frequency; -inf at 0 Hz."""
    f2 = np.asarray(frequency_hz, dtype=np.float64) ** 2
    with np.errstate(divide="ignore"):
        response = (12194.0**2 * f2**2) / (
            (f2 + 20.6**2) * np.sqrt((f2 + 107.7**2) * (f2 + 737.9**2)) * (f2 + 12194.0**2)
        )
        return np.asarray(20.0 * np.log10(response) + 2.0)


def laeq_db(samples: np.ndarray, rate: int, full_scale_db: float = FULL_SCALE_DB) -> float:
    """A-weighted Leq of ``samples`` (full scale 1.0) in dB SPL: the mean square of the
    A-weighted signal from its spectrum (Parseval), with the A curve applied per FFT bin."""
    audio = np.asarray(samples, dtype=np.float64)
    if audio.ndim != 1 or audio.size == 0:
        raise StreamError(f"laeq_db: expected non-empty mono samples, got shape {audio.shape}")
    spectrum = np.abs(np.fft.rfft(audio)) ** 2
    gain = 10.0 ** (a_weighting_db(np.fft.rfftfreq(audio.size, 1.0 / rate)) / 10.0)
    doubled = np.full(spectrum.size, 2.0)
    doubled[0] = 1.0
    if audio.size % 2 == 0:
        doubled[-1] = 1.0  # the Nyquist bin appears once
    mean_square = float(np.sum(spectrum * gain * doubled)) / audio.size**2
    return full_scale_db + 10.0 * math.log10(max(mean_square, 1e-30))


def at_rate(samples: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """``samples`` resampled from ``rate`` to ``target_rate`` (polyphase, scipy)."""
    if rate == target_rate:
        return np.asarray(samples, dtype=np.float64)
    common = math.gcd(rate, target_rate)
    return np.asarray(resample_poly(samples, target_rate // common, rate // common))


def scaled_to(samples: np.ndarray, rate: int, level_db: float, full_scale_db: float) -> np.ndarray:
    """``samples`` with the gain that makes their LAeq ``level_db``."""
    current = laeq_db(samples, rate, full_scale_db)
    return np.asarray(samples * 10.0 ** ((level_db - current) / 20.0))


def plan_stream(utterances: Sequence[Utterance], conditions: StreamConditions) -> list[Placement]:
    """Where each utterance goes: shuffled order, one slot each, a random offset in the slot's
    second second (module docstring). Placements are in stream order."""
    if not utterances:
        raise StreamError("no utterances to place in a stream")
    rng = np.random.default_rng(conditions.seed)
    order = rng.permutation(len(utterances))
    offsets = rng.uniform(0.0, 1.0, len(utterances))
    rate = conditions.rate
    placements, slot_start_s = [], 0
    for position, index in enumerate(order):
        utterance = utterances[int(index)]
        if utterance.samples.size == 0:
            raise StreamError(f"utterance {utterance.clip_id}: no samples")
        n_samples = math.ceil(utterance.samples.size * rate / utterance.rate)
        slot_s = LEAD_S + 1 + math.ceil(n_samples / rate)
        onset = (slot_start_s + LEAD_S) * rate + int(offsets[position] * rate)
        placements.append(Placement(int(index), slot_start_s, slot_s, onset, n_samples, rate))
        slot_start_s += slot_s
    return placements


def stream_seconds(placements: Sequence[Placement]) -> int:
    """Length of the planned stream in whole seconds (its slots and a trailing second)."""
    return placements[-1].slot_start_s + placements[-1].slot_s + TRAIL_S if placements else 0


class PinkFloor:
    """Continuous pink noise at an A-weighted LAeq of ``level_db``, a block at a time
    (the filter's state carries over, so blocks join without a seam); seeded."""

    def __init__(self, level_db: float, rate: int, full_scale_db: float, seed: int) -> None:
        calibration = np.random.default_rng([seed, 2]).normal(0.0, 1.0, CALIBRATION_S * rate)
        pink = lfilter(PINK_B, PINK_A, calibration)[rate:]  # the filter's start-up left out
        self.gain = 10.0 ** ((level_db - laeq_db(pink, rate, full_scale_db)) / 20.0)
        self.rng = np.random.default_rng([seed, 1])
        self.state = np.zeros(len(PINK_A) - 1)
        warm_up = self.block(rate)  # start the stream with the filter settled
        del warm_up

    def block(self, n_samples: int) -> np.ndarray:
        white = self.rng.normal(0.0, 1.0, n_samples)
        pink, self.state = lfilter(PINK_B, PINK_A, white, zi=self.state)
        return np.asarray(pink * self.gain)


def stream_blocks(
    utterances: Sequence[Utterance], placements: Sequence[Placement], conditions: StreamConditions
) -> Iterator[np.ndarray]:
    """The planned stream, one second (``conditions.rate`` samples) at a time: the floor,
    and each utterance resampled to the stream's rate and scaled to ``speech_db``."""
    rate = conditions.rate
    floor = None
    if conditions.floor_db is not None:
        floor = PinkFloor(conditions.floor_db, rate, conditions.full_scale_db, conditions.seed)
    for placement in placements:
        utterance = utterances[placement.index]
        voice = scaled_to(at_rate(utterance.samples, utterance.rate, rate), rate,
                          conditions.speech_db, conditions.full_scale_db)  # fmt: skip
        slot = np.zeros(placement.slot_s * rate) if floor is None else floor.block(
            placement.slot_s * rate)  # fmt: skip
        start = placement.onset_sample - placement.slot_start_s * rate
        slot[start : start + voice.size] += voice[: placement.n_samples]
        for second in range(placement.slot_s):
            yield slot[second * rate : (second + 1) * rate]
    for _ in range(TRAIL_S):
        yield np.zeros(rate) if floor is None else floor.block(rate)
