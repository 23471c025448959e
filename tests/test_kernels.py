"""The compiled filter loops agree with scipy's public functions, computed the plain way."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import signal

from sensor.kernels import (
    CHAINS,
    IDENTITY_SECTION,
    SILENT_SECTION,
    four_chain_pass,
    sosfilt,
    stack_chains,
    weighted_meter_pass,
)
from sensor.levels import weighting_sos

BAND_SOS = signal.butter(3, [891.0, 1122.0], btype="bandpass", fs=48000, output="sos")
DC_BLOCKER_SOS = np.array([[0.99993, -0.99993, 0.0, 1.0, -0.99987, 0.0]])  # 1 Hz at 48 kHz


@pytest.mark.parametrize("sos", [BAND_SOS, DC_BLOCKER_SOS], ids=["three sections", "one"])
def test_fast_sosfilt_equals_scipy_and_carries_state(sos: np.ndarray) -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal(5000)
    expected, expected_zi = signal.sosfilt(sos, x, zi=np.zeros((sos.shape[0], 2)))
    zi = np.zeros((sos.shape[0], 2))
    first = sosfilt(sos, x[:1234], zi)
    second = sosfilt(sos, x[1234:], zi)
    np.testing.assert_allclose(np.concatenate([first, second]), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(zi, expected_zi, rtol=0, atol=1e-12)


def test_fast_sosfilt_leaves_its_input_alone() -> None:
    sos = signal.butter(2, 1000.0, fs=16000, output="sos")
    x = np.linspace(-1.0, 1.0, 100)
    copy = x.copy()
    sosfilt(sos, x, np.zeros((1, 2)))
    np.testing.assert_array_equal(x, copy)


def test_stack_chains_pads_the_shorter_chain_with_pass_through_sections() -> None:
    short = signal.butter(2, 1000.0, fs=16000, output="sos")  # 1 section
    stacked = stack_chains([BAND_SOS, short])
    assert stacked.shape == (3, 6, 2)
    np.testing.assert_array_equal(stacked[:, :, 0], BAND_SOS)
    np.testing.assert_array_equal(stacked[0, :, 1], short[0])
    np.testing.assert_array_equal(stacked[1:, :, 1], [IDENTITY_SECTION, IDENTITY_SECTION])


def test_four_chain_pass_equals_scipy_per_chain_across_split_blocks() -> None:
    """Three band-passes of different lengths and a low-pass, as the bank runs them: each
    chain's energy, last squared output and (chain 3) output equal scipy.signal.sosfilt's,
    with the state carried from one block to the next."""
    chains = [
        BAND_SOS,
        signal.butter(4, [1800.0, 2240.0], btype="bandpass", fs=48000, output="sos"),
        SILENT_SECTION[None, :],
        signal.cheby2(6, 80.0, 18000.0, fs=48000, output="sos"),
    ]
    stacked = stack_chains(chains)
    zi = np.zeros((stacked.shape[0], 2, CHAINS))
    x = np.random.default_rng(10).standard_normal(3001)
    for block in (x[:1000], x[1000:]):
        energy, last_power = np.empty(CHAINS), np.empty(CHAINS)
        chain_3 = np.empty_like(block)
        four_chain_pass(block, stacked, zi, energy, last_power, chain_3)
    outputs = [signal.sosfilt(sos, x)[1000:] for sos in chains]
    np.testing.assert_allclose(energy, [np.sum(y * y) for y in outputs], rtol=1e-12)
    np.testing.assert_allclose(last_power, [y[-1] ** 2 for y in outputs], rtol=1e-12)
    np.testing.assert_allclose(chain_3, outputs[3], rtol=0, atol=1e-12)
    assert energy[2] == 0.0


def test_weighted_meter_pass_equals_scipy_filters_and_averagers() -> None:
    """The fused loop against the plain computation: sosfilt for A and C, lfilter for the
    F and S exponential averagers (IEC 61672-1), numpy for sums and extremes."""
    rate, step = 48000, 960
    a_sos, c_sos = weighting_sos("A", rate), weighting_sos("C", rate)
    fast, slow = np.exp(-1.0 / (rate * 0.125)), np.exp(-1.0 / (rate * 1.0))
    x = 0.1 * np.random.default_rng(11).standard_normal(rate // 2)
    x[100] = 1.0  # one clipped sample
    per_step = [np.empty(x.size // step) for _ in range(3)]
    state = np.zeros(2)
    totals = weighted_meter_pass(
        x, stack_chains([a_sos, c_sos]), np.zeros((3, 2, 2)), state, fast, slow, step,
        0.999, *per_step,
    )  # fmt: skip
    a2 = signal.sosfilt(a_sos, x) ** 2
    c2 = signal.sosfilt(c_sos, x) ** 2
    f = signal.lfilter([1.0 - fast], [1.0, -fast], a2)
    s = signal.lfilter([1.0 - slow], [1.0, -slow], a2)
    expected = (a2.sum(), c2.sum(), np.sum(x * x), f.max(), f.min(), s.max(), 1)
    np.testing.assert_allclose(totals, expected, rtol=1e-10)
    np.testing.assert_allclose(per_step[0], a2.reshape(-1, step).sum(axis=1), rtol=1e-10)
    np.testing.assert_allclose(per_step[1], f.reshape(-1, step).max(axis=1), rtol=1e-10)
    np.testing.assert_allclose(per_step[2], f[step - 1 :: step], rtol=1e-10)
    np.testing.assert_allclose(state, [f[-1], s[-1]], rtol=1e-10)
