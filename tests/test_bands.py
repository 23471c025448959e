"""Specification of sensor.bands: IEC 61260-1:2014 one-third-octave bands, base-10 system.

Known answers are the exact mid-band frequencies and the class 1 relative-attenuation
limits of IEC 61260-1:2014 Table 1, transcribed from shared/reference/reference_values.json
(key ``iec61260_1_2014``) so the tests need no files outside the repository. Band levels
are Z-weighted Leq in dB; signals are in digital full scale (RMS 1.0 reads FULL_SCALE_DB).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import signal

from sensor.bands import (
    ThirdOctaveBank,
    band_centre_hz,
    band_edges_hz,
    third_octave_band_indices,
)
from sensor.levels import MEAN_SQUARE_FLOOR

FULL_SCALE_DB = 100.0
SUPPORTED_RATES = (16000, 32000, 44100, 48000)
EDGE_RATIO = 10.0**0.05  # band edges are fm * 10**(-+0.05)

# IEC 61260-1:2014 exact base-10 mid-band frequencies, band number x -> Hz (4 decimals).
EXACT_MID_HZ = {
    -16: 25.1189, -15: 31.6228, -14: 39.8107, -13: 50.1187, -12: 63.0957, -11: 79.4328,
    -10: 100.0, -9: 125.8925, -8: 158.4893, -7: 199.5262, -6: 251.1886, -5: 316.2278,
    -4: 398.1072, -3: 501.1872, -2: 630.9573, -1: 794.3282, 0: 1000.0, 1: 1258.9254,
    2: 1584.8932, 3: 1995.2623, 4: 2511.8864, 5: 3162.2777, 6: 3981.0717, 7: 5011.8723,
    8: 6309.5734, 9: 7943.2823, 10: 10000.0,
}  # fmt: skip

# IEC 61260-1:2014 Table 1, class 1, mapped to one-third-octave Omega = f/fm (upper side;
# the lower side uses 1/Omega). Linear interpolation in lg(Omega) between breakpoints.
PASSBAND_MIN_DB = -0.4
PASSBAND_MAX = [(1.0, 0.4), (1.02667, 0.5), (1.05575, 0.7), (1.08746, 1.4), (1.12202, 5.3)]
STOPBAND_MIN = [(1.12202, 1.2), (1.29437, 16.6), (1.88173, 40.5), (3.05365, 60.0),
                (5.39195, 70.0)]  # fmt: skip


def class1_limits(omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lowest, highest) allowed relative attenuation in dB at normalised frequency Omega."""
    folded = np.where(omega < 1.0, 1.0 / omega, omega)
    lg = np.log10(folded)
    inside = folded <= EDGE_RATIO
    pass_lg, pass_db = np.log10([p for p, _ in PASSBAND_MAX]), [d for _, d in PASSBAND_MAX]
    stop_lg, stop_db = np.log10([p for p, _ in STOPBAND_MIN]), [d for _, d in STOPBAND_MIN]
    lowest = np.where(inside, PASSBAND_MIN_DB, np.interp(lg, stop_lg, stop_db))
    highest = np.where(inside, np.interp(lg, pass_lg, pass_db), np.inf)
    return lowest, highest


def sine_band_levels(
    bank: ThirdOctaveBank, frequency_hz: float, settle_s: float = 1.0, measure_s: float = 0.5
) -> np.ndarray:
    """Band levels of a unit-RMS sine, measured after ``settle_s`` over ``measure_s``."""
    sample_rate = bank.sample_rate
    t = np.arange(round((settle_s + measure_s) * sample_rate)) / sample_rate
    tone = np.sqrt(2.0) * np.sin(2.0 * np.pi * frequency_hz * t)
    settle = round(settle_s * sample_rate)
    bank.reset()
    bank.process(tone[:settle])
    return bank.process(tone[settle:])


@pytest.fixture(scope="module", params=SUPPORTED_RATES)
def centre_response(request: pytest.FixtureRequest) -> tuple[ThirdOctaveBank, np.ndarray]:
    """(bank, matrix[i, j] = level in band j of a unit-RMS sine at the centre of band i)."""
    bank = ThirdOctaveBank(request.param, FULL_SCALE_DB)
    return bank, np.array([sine_band_levels(bank, f) for f in bank.centres_hz])


def spectrum_noise(
    sample_rate: int, duration_s: float, low_hz: float, high_hz: float, pink: bool, seed: int
) -> np.ndarray:
    """Periodic noise with an exactly flat (white) or 1/f (pink) power spectrum between
    ``low_hz`` and ``high_hz`` and random phases, normalised to RMS 0.1."""
    n = round(duration_s * sample_rate)
    frequencies = np.fft.rfftfreq(n, 1.0 / sample_rate)
    inside = (frequencies >= low_hz) & (frequencies <= high_hz)
    magnitude = np.zeros(frequencies.size)
    magnitude[inside] = 1.0 / np.sqrt(frequencies[inside]) if pink else 1.0
    phases = np.random.default_rng(seed).uniform(0.0, 2.0 * np.pi, frequencies.size)
    samples = np.fft.irfft(magnitude * np.exp(1j * phases), n)
    return 0.1 * samples / np.sqrt(np.mean(samples**2))


def periodic_band_levels(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """Band levels of one period of a periodic signal, after one period to settle."""
    bank = ThirdOctaveBank(sample_rate, FULL_SCALE_DB)
    bank.process(samples)
    return bank.process(samples)


# --- band layout -----------------------------------------------------------------------------


def test_band_centres_equal_the_iec_exact_mid_band_frequencies() -> None:
    indices = np.array(sorted(EXACT_MID_HZ))
    expected = np.array([EXACT_MID_HZ[x] for x in indices])
    np.testing.assert_allclose(band_centre_hz(indices), expected, atol=5e-5)


def test_band_centre_of_a_scalar_index_is_a_float() -> None:
    assert band_centre_hz(0) == 1000.0
    assert isinstance(band_centre_hz(-10), float)


@pytest.mark.parametrize(
    ("sample_rate", "first", "last"),
    [(16000, -16, 8), (32000, -16, 10), (44100, -16, 10), (48000, -16, 10)],
)
def test_band_range_per_sample_rate(sample_rate: int, first: int, last: int) -> None:
    """25 Hz up to the highest band whose upper edge is below 0.45 fs, at most 10 kHz."""
    np.testing.assert_array_equal(
        third_octave_band_indices(sample_rate), np.arange(first, last + 1)
    )


@pytest.mark.parametrize(
    ("sample_rate", "count"), [(16000, 25), (32000, 27), (44100, 27), (48000, 27)]
)
def test_bank_reports_one_level_per_band(sample_rate: int, count: int) -> None:
    bank = ThirdOctaveBank(sample_rate, FULL_SCALE_DB)
    assert bank.band_indices.size == bank.centres_hz.size == count
    levels = bank.process(np.zeros(sample_rate // 10))
    assert levels.shape == (count,) and levels.dtype == np.float64


# --- filter shape (IEC 61260-1:2014 Table 1, class 1) ------------------------------------------


def test_sine_at_a_band_centre_reads_its_level_in_that_band(
    centre_response: tuple[ThirdOctaveBank, np.ndarray],
) -> None:
    """Unit gain at mid-band, less the effective-bandwidth normalisation the bank applies so
    that band powers of noise add up (about -0.2 dB, inside class 1's +-0.4 dB effective
    bandwidth deviation)."""
    bank, levels = centre_response
    normalisation_db = 10.0 * np.log10(bank.bandwidth_correction)
    np.testing.assert_allclose(np.diag(levels) - normalisation_db, FULL_SCALE_DB, atol=0.1)
    assert np.all(np.abs(normalisation_db) <= 0.4)


def test_neighbouring_bands_attenuate_a_centre_sine_by_the_class_1_limit(
    centre_response: tuple[ThirdOctaveBank, np.ndarray],
) -> None:
    """A sine at a band centre sits at Omega = 10**(+-0.1) of its neighbours, where class 1
    requires about 13.6 dB of relative attenuation."""
    _, levels = centre_response
    required, _ = class1_limits(np.array([10.0**0.1]))
    reference = np.diag(levels)
    below = reference[1:] - levels[1:, :-1].diagonal()  # sine at centre i+1, band i
    above = reference[:-1] - levels[:-1, 1:].diagonal()  # sine at centre i, band i+1
    assert below.min() >= required[0] and above.min() >= required[0]


@pytest.mark.parametrize("sample_rate", [16000, 48000])
@pytest.mark.parametrize("side", ["lower", "upper"])
def test_sine_at_a_band_edge_reads_3_db_down_in_that_band(side: str, sample_rate: int) -> None:
    bank = ThirdOctaveBank(sample_rate, FULL_SCALE_DB)
    edges = bank.centres_hz / EDGE_RATIO if side == "lower" else bank.centres_hz * EDGE_RATIO
    readings = np.array([sine_band_levels(bank, f)[i] for i, f in enumerate(edges)])
    normalisation_db = 10.0 * np.log10(bank.bandwidth_correction)
    np.testing.assert_allclose(readings - normalisation_db, FULL_SCALE_DB - 3.01, atol=0.1)


def test_every_band_meets_the_class_1_mask_from_12_hz_to_nyquist(
    centre_response: tuple[ThirdOctaveBank, np.ndarray],
) -> None:
    """Sines on a ~1/6-octave grid, through the whole multirate chain (so aliases count):
    every band's attenuation relative to its centre lies inside the class 1 limits."""
    bank, levels = centre_response
    reference = np.diag(levels)
    outside = []
    for frequency_hz in np.geomspace(12.0, 0.499 * bank.sample_rate, 64):
        attenuation = reference - sine_band_levels(bank, frequency_hz)
        lowest, highest = class1_limits(frequency_hz / bank.centres_hz)
        for band in np.flatnonzero((attenuation < lowest) | (attenuation > highest)):
            outside.append((round(frequency_hz, 1), bank.centres_hz[band].round(1)))
    assert outside == []


# --- broadband signals ------------------------------------------------------------------------


def band_sum_excess_db(sample_rate: int, pink: bool, seed: int) -> float:
    """Energy sum of the band levels minus the overall Z level, for noise confined to the
    bank's range (lowest lower edge to highest upper edge)."""
    centres = band_centre_hz(third_octave_band_indices(sample_rate))
    samples = spectrum_noise(
        sample_rate, 4.0, centres[0] / EDGE_RATIO, centres[-1] * EDGE_RATIO, pink=pink, seed=seed
    )
    overall_db = FULL_SCALE_DB + 10.0 * np.log10(np.mean(samples**2))
    band_sum_db = 10.0 * np.log10(
        np.sum(10.0 ** (periodic_band_levels(samples, sample_rate) / 10.0))
    )
    return float(band_sum_db - overall_db)


@pytest.mark.parametrize("sample_rate", [16000, 48000])
def test_white_noise_band_energies_add_up_to_the_overall_level(sample_rate: int) -> None:
    """Energy conservation for flat noise."""
    assert band_sum_excess_db(sample_rate, pink=False, seed=21) == pytest.approx(0.0, abs=0.5)


@pytest.mark.parametrize("sample_rate", [16000, 44100, 48000])
def test_pink_noise_reads_equal_levels_in_every_band(sample_rate: int) -> None:
    samples = spectrum_noise(sample_rate, 4.0, 10.0, 0.49 * sample_rate, pink=True, seed=22)
    levels = periodic_band_levels(samples, sample_rate)
    assert np.ptp(levels) < 0.25


def direct_bank_levels(
    samples: np.ndarray, sample_rate: int, band_indices: np.ndarray
) -> np.ndarray:
    """Brute-force reference: every band an order-3 Butterworth band-pass designed and run at
    the capture rate (no decimation), its noise bandwidth divided out as the bank does;
    band levels of one period of a periodic signal after one period to settle."""
    lower, upper = band_edges_hz(band_indices)
    levels = []
    for low_hz, high_hz in zip(lower, upper, strict=True):
        sos = signal.butter(3, [low_hz, high_hz], btype="bandpass", fs=sample_rate, output="sos")
        output = signal.sosfilt(sos, np.concatenate([samples, samples]))[samples.size :]
        frequencies, response = signal.sosfreqz(sos, worN=1 << 18, fs=sample_rate)
        power = np.abs(response) ** 2
        noise_bandwidth_hz = np.trapezoid(power, frequencies) / power.max()
        mean_square = np.mean(output**2) * (high_hz - low_hz) / noise_bandwidth_hz
        levels.append(FULL_SCALE_DB + 10.0 * np.log10(mean_square))
    return np.array(levels)


@pytest.mark.parametrize("sample_rate", [44100, 48000])
def test_multirate_bank_reads_pink_noise_as_a_direct_full_rate_bank_does(
    sample_rate: int,
) -> None:
    """The decimation chain (anti-alias low-passes, halvings, sample holding) changes no band
    level by more than 0.05 dB against the same bands filtered at the capture rate."""
    samples = spectrum_noise(sample_rate, 4.0, 10.0, 0.49 * sample_rate, pink=True, seed=5)
    bank = ThirdOctaveBank(sample_rate, FULL_SCALE_DB)
    reference = direct_bank_levels(samples, sample_rate, bank.band_indices)
    np.testing.assert_allclose(periodic_band_levels(samples, sample_rate), reference, atol=0.05)


# --- streaming --------------------------------------------------------------------------------


SPLIT_RATE = 44100
SPLIT_SIGNAL = 0.1 * np.random.default_rng(31).standard_normal(SPLIT_RATE)
PROBE = 0.1 * np.random.default_rng(32).standard_normal(SPLIT_RATE // 2)


def split(samples: np.ndarray, cut_points: list[int]) -> list[np.ndarray]:
    """``samples`` cut at the given sample indices (empty pieces dropped)."""
    cuts = sorted(set(cut_points) - {0, samples.size})
    return [piece for piece in np.split(samples, cuts) if piece.size]


cut_lists = st.lists(st.integers(0, SPLIT_RATE), min_size=1, max_size=40)


@settings(max_examples=20, deadline=None)
@given(cut_points=cut_lists)
def test_split_blocks_leave_the_bank_in_the_same_state(cut_points: list[int]) -> None:
    """Including the decimation phase: any split, odd pieces and single samples included."""
    whole = ThirdOctaveBank(SPLIT_RATE, FULL_SCALE_DB)
    pieces = ThirdOctaveBank(SPLIT_RATE, FULL_SCALE_DB)
    whole.process(SPLIT_SIGNAL)
    for piece in split(SPLIT_SIGNAL, cut_points):
        pieces.process(piece)
    np.testing.assert_allclose(pieces.process(PROBE), whole.process(PROBE), atol=1e-9)


@settings(max_examples=20, deadline=None)
@given(cut_points=cut_lists)
def test_block_band_leqs_combine_to_the_whole_signal_band_leqs(cut_points: list[int]) -> None:
    whole = ThirdOctaveBank(SPLIT_RATE, FULL_SCALE_DB).process(SPLIT_SIGNAL)
    bank = ThirdOctaveBank(SPLIT_RATE, FULL_SCALE_DB)
    pieces = split(SPLIT_SIGNAL, cut_points)
    parts = np.array([bank.process(piece) for piece in pieces])
    lengths = np.array([piece.size for piece in pieces])[:, None]
    combined = 10.0 * np.log10(np.sum(lengths * 10.0 ** (parts / 10.0), axis=0) / lengths.sum())
    np.testing.assert_allclose(combined, whole, atol=1e-9)


def test_quarter_second_blocks_at_44100_hz_match_one_block() -> None:
    """11025-sample blocks are odd, so every decimation stage changes phase between them."""
    signal_ = 0.1 * np.random.default_rng(33).standard_normal(4 * 11025)
    whole = ThirdOctaveBank(44100, FULL_SCALE_DB)
    quarters = ThirdOctaveBank(44100, FULL_SCALE_DB)
    whole.process(signal_)
    for start in range(0, signal_.size, 11025):
        quarters.process(signal_[start : start + 11025])
    np.testing.assert_allclose(quarters.process(PROBE), whole.process(PROBE), atol=1e-9)


def test_reset_returns_the_bank_to_its_initial_state() -> None:
    bank = ThirdOctaveBank(48000, FULL_SCALE_DB)
    bank.process(0.3 * np.random.default_rng(34).standard_normal(12345))
    bank.reset()
    probe = 0.1 * np.random.default_rng(35).standard_normal(24000)
    np.testing.assert_array_equal(
        bank.process(probe), ThirdOctaveBank(48000, FULL_SCALE_DB).process(probe)
    )


def test_silence_reads_the_documented_floor_in_every_band() -> None:
    levels = ThirdOctaveBank(48000, FULL_SCALE_DB).process(np.zeros(48000))
    np.testing.assert_allclose(levels, FULL_SCALE_DB + 10.0 * np.log10(MEAN_SQUARE_FLOOR))


# --- input validation --------------------------------------------------------------------------


@pytest.mark.parametrize("sample_rate", [8000, 22050, 96000])
def test_unsupported_sample_rate_is_refused(sample_rate: int) -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        ThirdOctaveBank(sample_rate, FULL_SCALE_DB)
    with pytest.raises(ValueError, match="sample_rate"):
        third_octave_band_indices(sample_rate)


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        (np.zeros((100, 2)), "1-D"),
        (np.zeros(0), "at least one sample"),
        (np.array([0.0, np.nan]), "finite"),
        (np.zeros(10, dtype=np.int32), "floating-point"),
    ],
)
def test_malformed_block_is_refused_with_the_reason(block: np.ndarray, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        ThirdOctaveBank(48000, FULL_SCALE_DB).process(block)


@pytest.mark.parametrize("sample_rate", [16000, 44100, 48000])
def test_pink_noise_band_energies_add_up_to_the_overall_level_within_0_1_db(
    sample_rate: int,
) -> None:
    """Pink noise confined to the bank's range: the energy sum of the band levels equals the
    broadband Z level (the bank divides out each filter's effective-bandwidth excess)."""
    assert band_sum_excess_db(sample_rate, pink=True, seed=23) == pytest.approx(0.0, abs=0.1)
