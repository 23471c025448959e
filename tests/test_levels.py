"""Specification of sensor.levels: IEC 61672-1:2013 weightings, time weighting and Leq.

Known answers come from IEC 61672-1:2013 Table 3 (frequency weightings and class 1
acceptance limits) and Table 4 (tone-burst design goals), transcribed from
shared/reference/reference_values.json (key ``iec61672_1_2013``) so the tests need no
files outside the repository. Levels are in dB; signals are in digital full scale.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import signal

from sensor.levels import (
    MEAN_SQUARE_FLOOR,
    REFERENCE_PRESSURE_PA,
    FrameLevels,
    LevelMeter,
    time_weighted_level_db,
    weighting_sos,
)

FULL_SCALE_DB = 120.0
SUPPORTED_RATES = (16000, 32000, 44100, 48000)
CLASS1_RATES = (44100, 48000)
INF = float("inf")

# IEC 61672-1:2013 Table 3 at the exact base-10 frequencies:
# (frequency Hz, A design goal dB, C design goal dB, class 1 lower limit, class 1 upper limit)
TABLE_3 = [
    (10.0, -70.4, -14.3, -INF, 3.0),  # 10 Hz
    (12.5893, -63.4, -11.2, -INF, 2.5),  # 12.5 Hz
    (15.8489, -56.7, -8.5, -4.0, 2.0),  # 16 Hz
    (19.9526, -50.5, -6.2, -2.0, 2.0),  # 20 Hz
    (25.1189, -44.7, -4.4, -1.5, 2.0),  # 25 Hz
    (31.6228, -39.4, -3.0, -1.5, 1.5),  # 31.5 Hz
    (39.8107, -34.6, -2.0, -1.0, 1.0),  # 40 Hz
    (50.1187, -30.2, -1.3, -1.0, 1.0),  # 50 Hz
    (63.0957, -26.2, -0.8, -1.0, 1.0),  # 63 Hz
    (79.4328, -22.5, -0.5, -1.0, 1.0),  # 80 Hz
    (100.0, -19.1, -0.3, -1.0, 1.0),  # 100 Hz
    (125.8925, -16.1, -0.2, -1.0, 1.0),  # 125 Hz
    (158.4893, -13.4, -0.1, -1.0, 1.0),  # 160 Hz
    (199.5262, -10.9, 0.0, -1.0, 1.0),  # 200 Hz
    (251.1886, -8.6, 0.0, -1.0, 1.0),  # 250 Hz
    (316.2278, -6.6, 0.0, -1.0, 1.0),  # 315 Hz
    (398.1072, -4.8, 0.0, -1.0, 1.0),  # 400 Hz
    (501.1872, -3.2, 0.0, -1.0, 1.0),  # 500 Hz
    (630.9573, -1.9, 0.0, -1.0, 1.0),  # 630 Hz
    (794.3282, -0.8, 0.0, -1.0, 1.0),  # 800 Hz
    (1000.0, 0.0, 0.0, -0.7, 0.7),  # 1000 Hz
    (1258.9254, 0.6, 0.0, -1.0, 1.0),  # 1250 Hz
    (1584.8932, 1.0, -0.1, -1.0, 1.0),  # 1600 Hz
    (1995.2623, 1.2, -0.2, -1.0, 1.0),  # 2000 Hz
    (2511.8864, 1.3, -0.3, -1.0, 1.0),  # 2500 Hz
    (3162.2777, 1.2, -0.5, -1.0, 1.0),  # 3150 Hz
    (3981.0717, 1.0, -0.8, -1.0, 1.0),  # 4000 Hz
    (5011.8723, 0.5, -1.3, -1.5, 1.5),  # 5000 Hz
    (6309.5734, -0.1, -2.0, -2.0, 1.5),  # 6300 Hz
    (7943.2823, -1.1, -3.0, -2.5, 1.5),  # 8000 Hz
    (10000.0, -2.5, -4.4, -3.0, 2.0),  # 10000 Hz
    (12589.2541, -4.3, -6.2, -5.0, 2.0),  # 12500 Hz
    (15848.9319, -6.6, -8.5, -16.0, 2.5),  # 16000 Hz
    (19952.6231, -9.3, -11.2, -INF, 3.0),  # 20000 Hz
]

# IEC 61672-1:2013 Table 4 design goals (REFERENCE.md 1.2): drop of LAFmax / LASmax below
# the steady level for a 4 kHz tone burst of the given duration, ms -> dB.
TONE_BURST_F_DB = {1000: 0.0, 500: -0.1, 200: -1.0, 100: -2.6, 50: -4.8, 20: -8.3, 10: -11.1}
TONE_BURST_S_DB = {1000: -2.0, 500: -4.1, 200: -7.4, 100: -10.2, 50: -13.1}
TONE_BURST_TOLERANCE_DB = 0.5


def sine(frequency_hz: float, amplitude: float, duration_s: float, sample_rate: int) -> np.ndarray:
    """A sine starting at phase 0, ``duration_s`` long (rounded to whole samples)."""
    t = np.arange(round(duration_s * sample_rate)) / sample_rate
    return amplitude * np.sin(2.0 * np.pi * frequency_hz * t)


def steady_levels(
    frequency_hz: float, amplitude: float, sample_rate: int, settle_s: float = 0.5
) -> FrameLevels:
    """Levels of a steady sine, measured over a whole number of its periods (about 0.25 s,
    at least 10) after the filters have settled for ``settle_s``."""
    cycles = max(round(frequency_hz / 4.0), 10)
    measure = round(cycles * sample_rate / frequency_hz)
    settle = round(settle_s * sample_rate)
    tone = sine(frequency_hz, amplitude, (settle + measure) / sample_rate, sample_rate)
    meter = LevelMeter(sample_rate, FULL_SCALE_DB)
    meter.process(tone[:settle])
    return meter.process(tone[settle:])


def noise(duration_s: float, sample_rate: int, seed: int) -> np.ndarray:
    """Seeded Gaussian noise at 0.1 RMS with a louder second half (a level step)."""
    rng = np.random.default_rng(seed)
    samples = 0.1 * rng.standard_normal(round(duration_s * sample_rate))
    samples[samples.size // 2 :] *= 3.0
    return samples


def energy_mean_db(levels_db: np.ndarray, weights: np.ndarray) -> float:
    """Duration-weighted energy average of levels, dB."""
    return float(10.0 * np.log10(np.average(10.0 ** (levels_db / 10.0), weights=weights)))


# --- calibration -------------------------------------------------------------------------


def test_reference_pressure_is_20_micropascal() -> None:
    assert REFERENCE_PRESSURE_PA == 20e-6


@pytest.mark.parametrize("sample_rate", SUPPORTED_RATES)
def test_unit_rms_1khz_sine_reads_full_scale_db_on_every_weighting(sample_rate: int) -> None:
    levels = steady_levels(1000.0, np.sqrt(2.0), sample_rate)
    assert levels.laeq_db == pytest.approx(FULL_SCALE_DB, abs=0.01)
    assert levels.lceq_db == pytest.approx(FULL_SCALE_DB, abs=0.01)
    assert levels.lzeq_db == pytest.approx(FULL_SCALE_DB, abs=0.01)


@pytest.mark.parametrize("sample_rate", SUPPORTED_RATES)
def test_tenth_rms_1khz_sine_reads_20_db_below_full_scale(sample_rate: int) -> None:
    levels = steady_levels(1000.0, 0.1 * np.sqrt(2.0), sample_rate)
    assert levels.laeq_db == pytest.approx(FULL_SCALE_DB - 20.0, abs=0.01)
    assert levels.lceq_db == pytest.approx(FULL_SCALE_DB - 20.0, abs=0.01)
    assert levels.lzeq_db == pytest.approx(FULL_SCALE_DB - 20.0, abs=0.01)


@pytest.mark.parametrize("sample_rate", SUPPORTED_RATES)
@pytest.mark.parametrize("weighting", ["A", "C", "Z"])
def test_digital_weighting_is_exactly_0_db_at_1khz(weighting: str, sample_rate: int) -> None:
    _, response = signal.sosfreqz(weighting_sos(weighting, sample_rate), [1000.0], fs=sample_rate)
    assert 20.0 * np.log10(np.abs(response[0])) == pytest.approx(0.0, abs=1e-9)


def test_z_weighting_is_the_identity_filter() -> None:
    samples = np.random.default_rng(3).standard_normal(1000)
    np.testing.assert_array_equal(signal.sosfilt(weighting_sos("Z", 48000), samples), samples)


def test_silence_reads_the_documented_floor_not_minus_infinity() -> None:
    levels = LevelMeter(48000, FULL_SCALE_DB).process(np.zeros(4800))
    floor_db = FULL_SCALE_DB + 10.0 * np.log10(MEAN_SQUARE_FLOOR)
    assert dataclasses.astuple(levels)[:6] == pytest.approx((floor_db,) * 6)


# --- frequency weighting (IEC 61672-1:2013 Table 3) ---------------------------------------


@pytest.mark.parametrize("sample_rate", CLASS1_RATES)
@pytest.mark.parametrize("weighting", ["A", "C"])
def test_steady_sines_meet_table_3_class_1_limits(weighting: str, sample_rate: int) -> None:
    """LAeq - LZeq (or LCeq - LZeq) of a steady sine minus the Table 3 design goal lies
    inside the class 1 acceptance limits at every Table 3 frequency below 0.45 fs."""
    outside = []
    for frequency_hz, a_goal, c_goal, lower, upper in TABLE_3:
        if frequency_hz >= 0.45 * sample_rate:
            continue
        levels = steady_levels(frequency_hz, np.sqrt(2.0), sample_rate)
        weighted = levels.laeq_db if weighting == "A" else levels.lceq_db
        deviation = weighted - levels.lzeq_db - (a_goal if weighting == "A" else c_goal)
        if not lower <= deviation <= upper:
            outside.append((frequency_hz, round(deviation, 2), lower, upper))
    assert outside == []


# --- time weighting ------------------------------------------------------------------------


def burst_drop_db(duration_ms: float, sample_rate: int, slow: bool) -> float:
    """LAFmax (or LASmax) of a 4 kHz burst cut from a steady sine, minus the steady LAeq."""
    steady = steady_levels(4000.0, np.sqrt(2.0), sample_rate).laeq_db
    burst = sine(4000.0, np.sqrt(2.0), duration_ms / 1000.0, sample_rate)
    levels = LevelMeter(sample_rate, FULL_SCALE_DB).process(
        np.concatenate([burst, np.zeros(sample_rate // 2)])
    )
    return (levels.lasmax_db if slow else levels.lafmax_db) - steady


@pytest.mark.parametrize("sample_rate", CLASS1_RATES)
@pytest.mark.parametrize("duration_ms", sorted(TONE_BURST_F_DB))
def test_fast_tone_burst_response_matches_table_4(duration_ms: int, sample_rate: int) -> None:
    drop = burst_drop_db(duration_ms, sample_rate, slow=False)
    assert drop == pytest.approx(TONE_BURST_F_DB[duration_ms], abs=TONE_BURST_TOLERANCE_DB)


@pytest.mark.parametrize("sample_rate", CLASS1_RATES)
@pytest.mark.parametrize("duration_ms", sorted(TONE_BURST_S_DB))
def test_slow_tone_burst_response_matches_table_4(duration_ms: int, sample_rate: int) -> None:
    drop = burst_drop_db(duration_ms, sample_rate, slow=True)
    assert drop == pytest.approx(TONE_BURST_S_DB[duration_ms], abs=TONE_BURST_TOLERANCE_DB)


@pytest.mark.parametrize(("slow", "time_constant_s"), [(False, 0.125), (True, 1.0)])
@pytest.mark.parametrize("duration_ms", [1000, 100, 10, 2])
def test_tone_burst_drop_follows_the_exponential_averager(
    duration_ms: int, slow: bool, time_constant_s: float
) -> None:
    """The detector is an exact exponential: drop = 10 lg(1 - exp(-Tb/tau))."""
    expected = 10.0 * np.log10(1.0 - np.exp(-duration_ms / 1000.0 / time_constant_s))
    assert burst_drop_db(duration_ms, 48000, slow) == pytest.approx(expected, abs=0.1)


@pytest.mark.parametrize(("slow", "decay_db_per_s"), [(False, 34.744), (True, 4.343)])
def test_level_decays_at_10_lg_e_over_tau_after_a_tone_stops(
    slow: bool, decay_db_per_s: float
) -> None:
    """After a steady tone stops the F/S level falls at 10 lg(e)/tau dB/s (REFERENCE 1.1)."""
    sample_rate = 48000
    meter = LevelMeter(sample_rate, FULL_SCALE_DB)
    meter.process(sine(1000.0, np.sqrt(2.0), 5.0, sample_rate))
    meter.process(np.zeros(sample_rate // 10))  # let the weighting filter ring out
    quiet = np.zeros(sample_rate // 10)
    first, second = meter.process(quiet), meter.process(quiet)
    step_db = (first.lasmax_db - second.lasmax_db) if slow else (first.lafmax_db - second.lafmax_db)
    assert step_db / 0.1 == pytest.approx(decay_db_per_s, abs=0.01)


def test_lafmax_equals_the_peak_of_the_offline_time_weighted_level() -> None:
    """Two ways to the same number: the streaming meter and the offline helper."""
    sample_rate = 48000
    samples = noise(2.0, sample_rate, seed=11)
    a_weighted = signal.sosfilt(weighting_sos("A", sample_rate), samples)
    offline = time_weighted_level_db(a_weighted, sample_rate, 0.125, FULL_SCALE_DB)
    levels = LevelMeter(sample_rate, FULL_SCALE_DB).process(samples)
    assert levels.lafmax_db == pytest.approx(offline.max(), abs=1e-9)
    assert levels.lafmin_db == pytest.approx(offline.min(), abs=1e-9)


def test_steady_noise_keeps_laf_between_lafmin_and_lafmax_around_laeq() -> None:
    sample_rate = 44100
    meter = LevelMeter(sample_rate, FULL_SCALE_DB)
    rng = np.random.default_rng(5)
    meter.process(0.1 * rng.standard_normal(2 * sample_rate))
    levels = meter.process(0.1 * rng.standard_normal(sample_rate))
    assert levels.lafmin_db < levels.laeq_db < levels.lafmax_db
    assert levels.lafmax_db - levels.lafmin_db < 3.0


# --- streaming -----------------------------------------------------------------------------


SPLIT_SIGNAL = noise(1.5, 44100, seed=7)
PROBE = noise(0.25, 44100, seed=8)


def split(samples: np.ndarray, cut_fractions: list[float]) -> list[np.ndarray]:
    """``samples`` cut at the given fractions of its length (empty pieces dropped)."""
    cuts = sorted({round(f * samples.size) for f in cut_fractions} - {0, samples.size})
    return [piece for piece in np.split(samples, cuts) if piece.size]


cut_lists = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40)


@settings(max_examples=25, deadline=None)
@given(cut_fractions=cut_lists)
def test_split_blocks_leave_the_meter_in_the_same_state(cut_fractions: list[float]) -> None:
    whole = LevelMeter(44100, FULL_SCALE_DB)
    pieces = LevelMeter(44100, FULL_SCALE_DB)
    whole.process(SPLIT_SIGNAL)
    for piece in split(SPLIT_SIGNAL, cut_fractions):
        pieces.process(piece)
    assert pieces.process(PROBE) == whole.process(PROBE)


@settings(max_examples=25, deadline=None)
@given(cut_fractions=cut_lists)
def test_block_leqs_combine_to_the_whole_signal_leq(cut_fractions: list[float]) -> None:
    whole = LevelMeter(44100, FULL_SCALE_DB).process(SPLIT_SIGNAL)
    meter = LevelMeter(44100, FULL_SCALE_DB)
    pieces = split(SPLIT_SIGNAL, cut_fractions)
    parts = [meter.process(piece) for piece in pieces]
    lengths = np.array([piece.size for piece in pieces])
    for name in ("laeq_db", "lceq_db", "lzeq_db"):
        combined = energy_mean_db(np.array([getattr(p, name) for p in parts]), lengths)
        assert combined == pytest.approx(getattr(whole, name), abs=1e-9)
    assert max(p.lafmax_db for p in parts) == pytest.approx(whole.lafmax_db, abs=1e-9)
    assert min(p.lafmin_db for p in parts) == pytest.approx(whole.lafmin_db, abs=1e-9)
    assert max(p.lasmax_db for p in parts) == pytest.approx(whole.lasmax_db, abs=1e-9)


def test_reset_returns_the_meter_to_its_initial_state() -> None:
    meter = LevelMeter(48000, FULL_SCALE_DB)
    meter.process(noise(1.0, 48000, seed=1))
    meter.reset()
    probe = noise(0.5, 48000, seed=2)
    assert meter.process(probe) == LevelMeter(48000, FULL_SCALE_DB).process(probe)


def test_single_sample_blocks_are_accepted() -> None:
    levels = LevelMeter(16000, FULL_SCALE_DB).process(np.array([0.5]))
    assert np.isfinite(levels.laeq_db) and levels.lzeq_db == pytest.approx(
        FULL_SCALE_DB + 20.0 * np.log10(0.5)
    )


# --- clipping and input validation --------------------------------------------------------


def test_samples_at_or_above_the_clip_threshold_are_counted() -> None:
    block = np.array([0.0, 0.5, 0.999, -0.999, 1.0, -1.0, 0.998])
    assert LevelMeter(48000, FULL_SCALE_DB).process(block).clipped_samples == 4


def test_custom_clip_threshold_is_used() -> None:
    block = np.array([0.0, 0.5, 0.9, -0.95])
    meter = LevelMeter(48000, FULL_SCALE_DB, clip_threshold=0.9)
    assert meter.process(block).clipped_samples == 2


@pytest.mark.parametrize("sample_rate", [8000, 22050, 96000, 0])
def test_unsupported_sample_rate_is_refused(sample_rate: int) -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        LevelMeter(sample_rate, FULL_SCALE_DB)


def test_unknown_weighting_is_refused() -> None:
    with pytest.raises(ValueError, match="weighting"):
        weighting_sos("B", 48000)


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        (np.zeros((2, 100)), "1-D"),
        (np.zeros(0), "at least one sample"),
        (np.array([0.0, np.nan, 0.1]), "finite"),
        (np.array([0.0, np.inf]), "finite"),
        (np.zeros(100, dtype=np.int16), "floating-point"),
    ],
)
def test_malformed_block_is_refused_with_the_reason(block: np.ndarray, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        LevelMeter(48000, FULL_SCALE_DB).process(block)
