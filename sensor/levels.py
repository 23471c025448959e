"""Frequency- and time-weighted sound levels per IEC 61672-1:2013.

Pure DSP: arrays in, levels in dB re 20 uPa out. Calibration is a single number,
``full_scale_db``: a signal whose RMS is 1.0 (digital full scale) reads ``full_scale_db``
dB SPL, so ``L = 10*lg(mean(x_w**2)) + full_scale_db``. A full-scale *sine* (peak 1.0)
therefore reads ``full_scale_db - 3.01`` dB.

Silence never yields -inf or NaN: every mean square is floored at
``MEAN_SQUARE_FLOOR`` (1e-20, i.e. 200 dB below full scale) before taking the logarithm.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import optimize, signal

from sensor.kernels import stack_chains, weighted_meter_pass

REFERENCE_PRESSURE_PA = 20e-6
"""p0 in pascal; levels are in dB re p0 (IEC 61672-1:2013 definitions)."""

SUPPORTED_SAMPLE_RATES_HZ: tuple[int, ...] = (16000, 32000, 44100, 48000)

MEAN_SQUARE_FLOOR = 1e-20
"""Smallest mean square (re digital full scale) used in a level: full_scale_db - 200 dB."""

# IEC 61672-1:2013 time weightings F and S: exponential time constants, seconds.
TIME_CONSTANT_FAST_S = 0.125
TIME_CONSTANT_SLOW_S = 1.0

# IEC 61672-1:2013 Annex E: pole frequencies of the analytic A and C weightings, Hz.
_F1_HZ = 20.598997
_F2_HZ = 107.65265
_F3_HZ = 737.86223
_F4_HZ = 12194.217
_REFERENCE_FREQUENCY_HZ = 1000.0

_WEIGHTINGS = ("A", "C", "Z")


def validate_sample_rate(sample_rate: int) -> int:
    """Return ``sample_rate`` (Hz) as an int, or raise ValueError if it is not supported."""
    if sample_rate not in SUPPORTED_SAMPLE_RATES_HZ:
        supported = ", ".join(str(rate) for rate in SUPPORTED_SAMPLE_RATES_HZ)
        raise ValueError(f"sample_rate must be one of {supported} Hz, got {sample_rate!r}")
    return int(sample_rate)


def validate_block(block: np.ndarray) -> np.ndarray:
    """Return ``block`` as a contiguous 1-D float64 array, or raise ValueError.

    The block must be a non-empty 1-D array of finite floating-point samples, nominally in
    [-1, 1] (digital full scale). Integer arrays are refused so raw int16 PCM is not
    mistaken for full-scale-normalised samples.
    """
    array = np.asarray(block)
    if array.ndim != 1:
        raise ValueError(f"block must be 1-D (mono samples), got shape {array.shape}")
    if array.size == 0:
        raise ValueError("block must contain at least one sample, got an empty array")
    if array.dtype.kind != "f":
        raise ValueError(
            f"block must hold floating-point samples in [-1, 1], got dtype {array.dtype}; "
            "scale integer PCM first (e.g. int16 / 32768)"
        )
    array = np.ascontiguousarray(array, dtype=np.float64)
    if not np.all(np.isfinite(array)):
        bad = int(np.flatnonzero(~np.isfinite(array))[0])
        raise ValueError(f"block must be finite, found {array[bad]} at sample {bad}")
    return array


def level_db(mean_square: float | np.ndarray, full_scale_db: float) -> float | np.ndarray:
    """Level in dB re 20 uPa of a mean square relative to digital full scale.

    ``mean_square`` is floored at ``MEAN_SQUARE_FLOOR`` so silence gives a finite level.
    Returns a float for scalar input, else an array of the same shape.
    """
    floored = np.maximum(mean_square, MEAN_SQUARE_FLOOR)
    levels = 10.0 * np.log10(floored) + full_scale_db
    if np.ndim(levels) == 0:
        return float(levels)
    return np.asarray(levels, dtype=np.float64)


def _analog_weighting_zeros_poles(weighting: str) -> tuple[np.ndarray, np.ndarray]:
    """Zeros and the poles below 1 kHz (rad/s) of the Annex E analytic A or C weighting.

    The double pole at f4 (12.2 kHz) is left out: ``_high_frequency_section`` realises it.
    The gain is set afterwards on the digital filter.
    """
    w1, w2, w3 = (2.0 * np.pi * f for f in (_F1_HZ, _F2_HZ, _F3_HZ))
    if weighting == "A":
        # IEC 61672-1:2013 Annex E:
        # A(f) ~ f4^2 f^4 / ((f^2+f1^2) (f^2+f2^2)^.5 (f^2+f3^2)^.5 (f^2+f4^2))
        return np.zeros(4), -np.array([w1, w1, w2, w3])
    # IEC 61672-1:2013 Annex E: C(f) ~ f4^2 f^2 / ((f^2+f1^2)(f^2+f4^2))
    return np.zeros(2), -np.array([w1, w1])


def _bilinear_low_sections(weighting: str, sample_rate: int) -> np.ndarray:
    """The zeros and the poles below 1 kHz through the bilinear transform, as sections
    (unit gain; the caller normalises at 1 kHz)."""
    zeros, poles = _analog_weighting_zeros_poles(weighting)
    return np.asarray(signal.zpk2sos(*signal.bilinear_zpk(zeros, poles, 1.0, fs=sample_rate)))


def analytic_weighting_db(weighting: str, frequency_hz: np.ndarray) -> np.ndarray:
    """The Annex E analytic A or C weighting (IEC 61672-1:2013 eqs. E.1-E.6), dB re 1 kHz.

    The design goal the digital filters are fitted to and tested against; not used on the
    signal path. ``frequency_hz`` > 0.
    """
    f2 = np.asarray(frequency_hz, dtype=np.float64) ** 2
    ref2 = _REFERENCE_FREQUENCY_HZ**2

    def response(f_sq: np.ndarray | float) -> np.ndarray:
        high = _F4_HZ**2 / ((f_sq + _F1_HZ**2) * (f_sq + _F4_HZ**2))
        if weighting == "A":
            return np.asarray(
                high * f_sq * f_sq / np.sqrt((f_sq + _F2_HZ**2) * (f_sq + _F3_HZ**2))
            )
        return np.asarray(high * f_sq)

    return np.asarray(20.0 * np.log10(response(f2) / response(ref2)))


# The fitted section matches the analytic curve up to this fraction of the Nyquist
# frequency (capped at 20 kHz): that covers Table 3 to 16 kHz at 48 kHz (0.67 of Nyquist), to
# 12.5 kHz at 44.1 kHz (0.57) and at 32 kHz (0.78),
# and leaves the section free to roll off above it.
_FIT_NYQUIST_FRACTION = 0.85
_FIT_MAX_HZ = 20000.0  # the top of Table 3
_FIT_MIN_HZ = 200.0  # below this the filter is within 0.001 dB of Annex E unfitted
_FIT_POINTS = 200


def _stable_quadratic(k1: float, k2: float) -> np.ndarray:
    """``[1, a1, a2]`` from unbounded parameters via reflection coefficients tanh(k1),
    tanh(k2), which keeps every root inside the unit circle whatever the optimiser tries."""
    r1, r2 = np.tanh(k1), np.tanh(k2)
    return np.array([1.0, r1 * (1.0 + r2), r2])


@functools.cache
def _high_frequency_section(weighting: str, sample_rate: int) -> tuple[float, ...]:
    """One biquad (b0, b1, b2, 1, a1, a2) for the f4 double pole, fitted by least squares
    so that it times the bilinear low part matches the analytic magnitude in dB.

    The bilinear transform maps the analogue f4 poles' response at Nyquist onto
    z = -1, which pulls the response down near Nyquist (-6.4 dB at 16 kHz at 48 kHz); a
    freely fitted biquad in its place costs nothing more per sample and stays within
    0.03 dB of Annex E up to 0.85 of Nyquist (docs/MEASUREMENT.md, "How the weighting
    filters are made"). Cached: a few hundred milliseconds once per rate on a Pi.
    """
    low = _bilinear_low_sections(weighting, sample_rate)
    top_hz = min(_FIT_MAX_HZ, _FIT_NYQUIST_FRACTION * sample_rate / 2.0)
    grid_hz = np.concatenate(
        [[_REFERENCE_FREQUENCY_HZ], np.geomspace(_FIT_MIN_HZ, top_hz, _FIT_POINTS)]
    )
    _, low_response = signal.sosfreqz(low, worN=grid_hz, fs=sample_rate)
    low_db = 20.0 * np.log10(np.abs(low_response))
    target_db = analytic_weighting_db(weighting, grid_hz[1:])

    def error_db(params: np.ndarray) -> np.ndarray:
        numerator = _stable_quadratic(params[0], params[1])
        denominator = _stable_quadratic(params[2], params[3])
        _, response = signal.freqz(numerator, denominator, worN=grid_hz, fs=sample_rate)
        model_db = low_db + 20.0 * np.log10(np.abs(response))
        return np.asarray(model_db[1:] - model_db[0] - target_db)  # 0 dB at 1 kHz

    # Start: zeros near Nyquist and a real pole pair, roughly where the bilinear ones sit.
    start = np.arctanh([0.9, 0.2, -0.5, 0.1])
    fitted = optimize.least_squares(error_db, start, method="lm").x
    section = np.concatenate(
        [_stable_quadratic(fitted[0], fitted[1]), _stable_quadratic(fitted[2], fitted[3])]
    )
    return tuple(float(c) for c in section)


def weighting_sos(weighting: str, sample_rate: int) -> np.ndarray:
    """Digital A, C or Z frequency weighting as second-order sections.

    The Annex E analytic poles below 1 kHz and the zeros at 0 Hz (IEC 61672-1:2013) are
    mapped with the bilinear transform, which is exact to 0.001 dB there; the double pole
    at f4 = 12.2 kHz is one biquad fitted by least squares to the analytic magnitude
    (``_high_frequency_section``). The gain is set so the *digital* filter reads exactly
    0 dB at 1 kHz (the normalisation A1000/C1000 of Annex E). Within 0.03 dB of Annex E at
    every Table 3 frequency up to 16 kHz at 48 kHz and 12.5 kHz at 44.1 kHz (tested to
    0.1 dB). 'Z' returns the identity section. Returns an array of shape (n_sections, 6)
    for ``scipy.signal.sosfilt``.
    """
    sample_rate = validate_sample_rate(sample_rate)
    weighting = weighting.upper() if isinstance(weighting, str) else weighting
    if weighting not in _WEIGHTINGS:
        raise ValueError(f"weighting must be one of {', '.join(_WEIGHTINGS)}, got {weighting!r}")
    if weighting == "Z":
        return np.array([[1.0, 0.0, 0.0, 1.0, 0.0, 0.0]])
    low = _bilinear_low_sections(weighting, sample_rate)
    sos = np.vstack([low, np.array(_high_frequency_section(weighting, sample_rate))])
    _, response = signal.sosfreqz(sos, worN=[_REFERENCE_FREQUENCY_HZ], fs=sample_rate)
    sos[0, :3] /= np.abs(response[0])
    return sos


def time_weighting_coefficient(sample_rate: int, time_constant_s: float) -> float:
    """Pole ``a = exp(-1/(fs*tau))`` of the discrete exponential averager that realises the
    IEC 61672-1:2013 time-weighting definition."""
    return float(np.exp(-1.0 / (sample_rate * time_constant_s)))


def time_weighted_mean_square(
    squared: np.ndarray, coefficient: float, state: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exponentially time-weighted mean square ``y[n] = a*y[n-1] + (1-a)*x[n]``.

    ``squared`` holds squared weighted samples (full scale = 1.0); ``coefficient`` is ``a``
    from ``time_weighting_coefficient``; ``state`` is the ``zi`` returned by the previous
    call (None starts from silence). Returns (mean squares, next state).
    """
    if state is None:
        state = np.zeros(1)
    averaged, next_state = signal.lfilter(
        [1.0 - coefficient], [1.0, -coefficient], squared, zi=state
    )
    return averaged, next_state


def time_weighted_level_db(
    weighted: np.ndarray, sample_rate: int, time_constant_s: float, full_scale_db: float
) -> np.ndarray:
    """Time-weighted level L_tau(t) in dB of an already frequency-weighted signal.

    Offline helper: the averager starts from silence at the first sample. ``weighted`` is
    in digital full scale units; ``time_constant_s`` is 0.125 for F, 1.0 for S. Returns one
    level per sample (IEC 61672-1:2013 time-weighted level).
    """
    samples = validate_block(weighted)
    coefficient = time_weighting_coefficient(validate_sample_rate(sample_rate), time_constant_s)
    averaged, _ = time_weighted_mean_square(samples * samples, coefficient)
    return np.asarray(level_db(averaged, full_scale_db))


@dataclass(frozen=True)
class FrameLevels:
    """Levels of one block, dB re 20 uPa.

    Leq values are plain time averages over the block (IEC 61672-1:2013 time-averaged
    level); LAFmax, LAFmin
    and LASmax are the extremes of the F/S time-weighted A level within the block.
    ``clipped_samples`` counts input samples whose magnitude reached the clip threshold.
    """

    laeq_db: float
    lceq_db: float
    lzeq_db: float
    lafmax_db: float
    lafmin_db: float
    lasmax_db: float
    clipped_samples: int


@dataclass(frozen=True)
class StepLevels:
    """Short-time levels of consecutive equal steps of a block, dB re 20 uPa, one per step.

    ``laeq_db``: A-weighted Leq over the step; ``lafmax_db``: maximum of LAF within the
    step; ``laf_db``: LAF sampled at the step's last sample (the time-weighted level a meter
    shows at that instant, which is what percentile levels are computed from).
    """

    laeq_db: np.ndarray
    lafmax_db: np.ndarray
    laf_db: np.ndarray


class LevelMeter:
    """Streaming sound level meter. Stateful: filter states and F/S time-weighting states
    carry across blocks, so feeding a signal in one block or many gives identical results.

    After construction or ``reset`` the filters and averagers start from silence, so the
    first ~0.5 s (F) or ~4 s (S) of LAF/LAS levels include the detector's rise from zero;
    LAFmin of the first block in particular reads low.
    """

    def __init__(
        self, sample_rate: int, full_scale_db: float, clip_threshold: float = 0.999
    ) -> None:
        """``sample_rate`` in Hz; ``full_scale_db`` is the dB SPL read for RMS 1.0;
        ``clip_threshold`` is the |sample| (full scale = 1.0) counted as clipped."""
        self.sample_rate = validate_sample_rate(sample_rate)
        if not np.isfinite(full_scale_db):
            raise ValueError(f"full_scale_db must be finite, got {full_scale_db!r}")
        if not 0.0 < clip_threshold <= 1.0:
            raise ValueError(f"clip_threshold must be in (0, 1], got {clip_threshold!r}")
        self.full_scale_db = float(full_scale_db)
        self.clip_threshold = float(clip_threshold)
        # A in chain 0, C in chain 1 of one fused loop (sensor.kernels.weighted_meter_pass).
        self._sos = stack_chains(
            [weighting_sos("A", self.sample_rate), weighting_sos("C", self.sample_rate)]
        )
        self._fast = time_weighting_coefficient(self.sample_rate, TIME_CONSTANT_FAST_S)
        self._slow = time_weighting_coefficient(self.sample_rate, TIME_CONSTANT_SLOW_S)
        self.reset()

    def reset(self) -> None:
        """Return every filter and averager to silence, as after construction."""
        self._zi = np.zeros((self._sos.shape[0], 2, 2))
        self._averagers = np.zeros(2)  # F and S mean squares, IEC 61672-1 time weighting

    def process(self, block: np.ndarray) -> FrameLevels:
        """Levels over ``block`` (1-D float samples, full scale 1.0, any length > 0)."""
        levels, _ = self.process_steps(block, step=len(block))
        return levels

    def process_steps(
        self, block: np.ndarray, step: int
    ) -> tuple[FrameLevels, StepLevels]:
        """Levels over ``block`` and, for each consecutive ``step`` samples, short-time levels.

        ``len(block)`` must be a multiple of ``step``. One filter pass serves both.
        """
        samples = validate_block(block)
        count = samples.size
        if step <= 0 or count % step:
            raise ValueError(f"block of {count} samples is not a whole number of {step}-steps")
        n_steps = count // step
        step_a_sum = np.empty(n_steps)
        step_fast_max = np.empty(n_steps)
        step_fast_end = np.empty(n_steps)
        sum_a, sum_c, sum_z, fast_max, fast_min, slow_max, clipped = weighted_meter_pass(
            samples, self._sos, self._zi, self._averagers, self._fast, self._slow, step,
            self.clip_threshold, step_a_sum, step_fast_max, step_fast_end,
        )
        full_scale_db = self.full_scale_db
        levels = FrameLevels(
            laeq_db=float(level_db(sum_a / count, full_scale_db)),
            lceq_db=float(level_db(sum_c / count, full_scale_db)),
            lzeq_db=float(level_db(sum_z / count, full_scale_db)),
            lafmax_db=float(level_db(fast_max, full_scale_db)),
            lafmin_db=float(level_db(fast_min, full_scale_db)),
            lasmax_db=float(level_db(slow_max, full_scale_db)),
            clipped_samples=int(clipped),
        )
        steps = StepLevels(
            laeq_db=np.asarray(level_db(step_a_sum / step, full_scale_db)),
            lafmax_db=np.asarray(level_db(step_fast_max, full_scale_db)),
            laf_db=np.asarray(level_db(step_fast_end, full_scale_db)),
        )
        return levels, steps

