"""The compiled and fast-path filter loops agree with scipy's public functions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import signal

from sensor.kernels import sosfilt, sum_of_squares


def test_fast_sosfilt_equals_scipy_and_carries_state() -> None:
    rng = np.random.default_rng(9)
    sos = signal.butter(3, [891.0, 1122.0], btype="bandpass", fs=48000, output="sos")
    x = rng.standard_normal(5000)
    expected, expected_zi = signal.sosfilt(sos, x, zi=np.zeros((3, 2)))
    zi = np.zeros((3, 2))
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


def test_sum_of_squares_equals_the_dot_product() -> None:
    x = np.random.default_rng(4).standard_normal(48000)
    assert sum_of_squares(x) == pytest.approx(float(np.dot(x, x)), rel=1e-12)


def test_sum_of_squares_of_a_known_vector() -> None:
    assert sum_of_squares(np.array([3.0, -4.0, 0.5])) == 25.25
