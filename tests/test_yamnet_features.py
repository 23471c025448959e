"""YAMNet's front end (sensor/yamnet_features.py) against a slow, literal implementation of its
definition (TensorFlow Models' yamnet features.py: periodic Hann, |DFT|, HTK mel triangles,
log(mel + 0.001)), YAMNet's clip padding, and streaming that does not depend on block sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sensor import yamnet_features as yf

SR = 16_000


def slow_log_mel(samples: np.ndarray) -> np.ndarray:
    """The definition, written out: loops over frames, bins and bands, DFT as a sum."""
    window = np.array([0.5 - 0.5 * math.cos(2 * math.pi * n / 400) for n in range(400)])
    n_frames = 1 + (len(samples) - 400) // 160
    k = np.arange(257)[:, None]
    n = np.arange(400)[None, :]
    # DFT of the 400 windowed samples zero-padded to 512: the padding adds nothing to the sum.
    basis = np.exp(-2j * math.pi * k * n / 512)

    def mel(f: float) -> float:
        return 1127.0 * math.log(1.0 + f / 700.0)

    edges = [mel(125.0) + i * (mel(7500.0) - mel(125.0)) / 65 for i in range(66)]
    rows = []
    for t in range(n_frames):
        frame = samples[160 * t : 160 * t + 400] * window
        magnitude = np.abs(basis @ frame)
        bands = []
        for b in range(64):
            lower, centre, upper = edges[b], edges[b + 1], edges[b + 2]
            total = 0.0
            for bin_index in range(1, 257):  # no weight on the DC bin
                m = mel(bin_index * 8000.0 / 256)
                weight = max(
                    0.0, min((m - lower) / (centre - lower), (upper - m) / (upper - centre))
                )
                total += weight * magnitude[bin_index]
            bands.append(math.log(total + 0.001))
        rows.append(bands)
    return np.array(rows)


def test_log_mel_frames_match_the_definition_computed_slowly() -> None:
    rng = np.random.default_rng(24)
    t = np.arange(2_000) / SR
    samples = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(t.size)
    fast = yf.log_mel_frames(samples)
    slow = slow_log_mel(samples)
    assert fast.shape == slow.shape == (11, 64)  # 1 + (2000 - 400) // 160
    np.testing.assert_allclose(fast, slow, atol=1e-4)


def test_mel_triangles_span_125_to_7500_hz_and_leave_dc_unweighted() -> None:
    weights = yf.mel_weight_matrix()
    bin_hz = np.linspace(0, SR / 2, 257)
    weighted = bin_hz[weights.any(axis=1)]
    assert weights.shape == (257, 64)
    assert not weights[0].any()
    assert weighted.min() > 125.0 and weighted.max() < 7500.0
    assert weights.max() <= 1.0 and weights.min() == 0.0


def test_digital_silence_gives_log_of_the_offset_everywhere() -> None:
    frames = yf.log_mel_frames(np.zeros(SR))
    np.testing.assert_allclose(frames, math.log(0.001), rtol=1e-6)


def test_a_1_khz_tone_peaks_in_the_band_centred_nearest_1_khz() -> None:
    t = np.arange(SR) / SR
    frames = yf.log_mel_frames(0.5 * np.sin(2 * np.pi * 1000 * t))
    edges_mel = np.linspace(yf.hertz_to_mel(125.0), yf.hertz_to_mel(7500.0), 66)
    centres_hz = 700.0 * np.expm1(edges_mel[1:-1] / 1127.0)
    expected = int(np.argmin(np.abs(centres_hz - 1000.0)))
    assert set(np.argmax(frames, axis=1)) == {expected}


@pytest.mark.parametrize(
    ("n_samples", "n_patches"),
    [(7_190, 1), (15_600, 1), (15_601, 2), (15_600 + 7_680, 2), (3 * SR, 6), (0, 1)],
)
def test_a_clip_is_padded_as_yamnet_pads_it(n_samples: int, n_patches: int) -> None:
    # At least 0.975 s, then whole 0.48 s hops: 3 s -> ceil((48000 - 15600) / 7680) + 1 = 6.
    patches = yf.clip_patches(np.full(n_samples, 0.1))
    assert patches.shape == (n_patches, 96, 64)


def test_patch_i_starts_0_48_s_after_patch_i_minus_1() -> None:
    rng = np.random.default_rng(3)
    samples = rng.standard_normal(3 * SR) * 0.1
    frames = yf.log_mel_frames(samples)
    patches = yf.patches_of_frames(frames)
    assert len(patches) == 1 + (len(frames) - 96) // 48
    np.testing.assert_array_equal(patches[2], frames[96:192])


def test_streaming_patches_do_not_depend_on_how_the_stream_is_cut() -> None:
    rng = np.random.default_rng(7)
    stream = rng.standard_normal(5 * SR) * 0.2
    expected = yf.patches_of_frames(yf.log_mel_frames(stream))
    for sizes in ([SR] * 5, [1, 399, 160, 7_679, 30_000, 41_761], [800] * 100):
        front_end = yf.YamnetFrontEnd()
        cuts = np.cumsum(sizes)[:-1]
        got = [front_end.process(block) for block in np.split(stream, cuts)]
        np.testing.assert_array_equal(np.concatenate(got), expected)
        assert front_end.patches_emitted == len(expected)


def test_streaming_keeps_only_what_the_next_patch_needs() -> None:
    front_end = yf.YamnetFrontEnd()
    for _ in range(60):
        front_end.process(np.full(SR, 0.01))
    assert len(front_end._frames) < 96 and len(front_end._samples) < 400


def test_a_nan_sample_is_refused_with_its_index() -> None:
    samples = np.zeros(SR)
    samples[1234] = np.nan
    with pytest.raises(yf.FrontEndError, match="sample 1234 is nan"):
        yf.clip_patches(samples)


def test_stereo_is_refused_with_its_shape() -> None:
    with pytest.raises(yf.FrontEndError, match=r"mono \(1-D\).*\(16000, 2\)"):
        yf.YamnetFrontEnd().process(np.zeros((SR, 2)))
