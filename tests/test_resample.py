"""The streaming resampler in front of YAMNet: block-size independent, delay-free, level kept."""

from __future__ import annotations

import numpy as np
import pytest

from sensor.resample import ResampleError, StreamResampler
from tests.conftest import sine


def _resampled(samples: np.ndarray, rate: int, block: int) -> np.ndarray:
    resampler = StreamResampler(rate)
    parts = [resampler.process(samples[i : i + block]) for i in range(0, samples.size, block)]
    parts.append(resampler.process(np.zeros(0), last=True))
    return np.concatenate(parts)


@pytest.mark.parametrize("rate", [48000, 44100, 32000])
def test_output_is_the_same_however_the_stream_is_cut_into_blocks(rate: int) -> None:
    signal = np.random.default_rng(3).normal(0.0, 0.1, 3 * rate)
    whole = _resampled(signal, rate, signal.size)
    np.testing.assert_array_equal(_resampled(signal, rate, 1024), whole)
    np.testing.assert_array_equal(_resampled(signal, rate, 4801), whole)
    assert whole.size == 3 * 16000


@pytest.mark.parametrize("rate", [48000, 44100, 32000])
def test_a_1_khz_tone_keeps_its_level(rate: int) -> None:
    tone = sine(1000.0, 0.1, 2.0, rate)  # RMS 0.1
    out = _resampled(tone, rate, 4800)[4000:-4000]  # away from the ends
    level_change_db = 20 * np.log10(np.sqrt(np.mean(out**2)) / 0.1)
    assert abs(level_change_db) < 0.01


def test_a_click_stays_at_its_time() -> None:
    """The filter's delay is compensated: input time t is output sample 16000 t."""
    click = np.zeros(48000)
    click[24000] = 1.0  # 0.5 s
    assert int(np.argmax(np.abs(_resampled(click, 48000, 1000)))) == 8000


def test_16_khz_passes_through_unchanged() -> None:
    signal = np.random.default_rng(4).normal(0.0, 0.1, 16000)
    np.testing.assert_array_equal(_resampled(signal, 16000, 999), signal)


def test_an_unsupported_rate_is_refused_with_the_rates_it_takes() -> None:
    with pytest.raises(ResampleError, match="22050 Hz.*48000"):
        StreamResampler(22050)
