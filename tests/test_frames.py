"""Frames: capture time from the sample count, block-split invariance, calibrated levels, and
the networks' outputs (wire v2) in the right frames."""

from __future__ import annotations

import numpy as np
import pytest

from sensor.dog_cnn import DogClassifier, cached_model
from sensor.errors import AudioInputError
from sensor.features import MelFeatures, mel_centre_frequencies_hz
from sensor.frames import (
    FrameBuilder,
    MeasurementOptions,
    _DcBlocker,
    envelope_blocks,
    frames_from_samples,
    mel_rows_from_samples,
)
from sensor.levels import LevelMeter
from sensor.resample import StreamResampler
from sensor.scoring import CNN_GATE_DB, cached_yamnet
from sensor.wire import PATCH_HOP_NS
from sensor.yamnet_features import PATCH_S, clip_patches
from tests.conftest import sine

START_NS = 1_780_000_000_000_000_000


def _frames(signal: np.ndarray, rate: int, block: int) -> list:
    builder = FrameBuilder("dev-1", rate, 120.0, START_NS)
    out = []
    for i in range(0, signal.size, block):
        out += builder.push(signal[i : i + block])
    return out + builder.finish()  # the frame held for the CNN's look-ahead


def test_capture_time_and_sequence_follow_the_sample_count() -> None:
    frames = _frames(sine(1000.0, 0.1, 3.0, 44100), 44100, 44100)
    assert [f.seq for f in frames] == [0, 1, 2]
    assert [f.capture_ns for f in frames] == [START_NS + i * 1_000_000_000 for i in range(3)]


def test_frames_do_not_depend_on_how_the_stream_is_split() -> None:
    rng = np.random.default_rng(7)
    signal = 0.05 * rng.standard_normal(3 * 48000)
    whole = _frames(signal, 48000, 48000)
    pieces = _frames(signal, 48000, 1237)
    for a, b in zip(whole, pieces, strict=True):
        assert a.laeq_db == pytest.approx(b.laeq_db, abs=1e-9)
        assert a.lafmax_db == pytest.approx(b.lafmax_db, abs=1e-9)
        np.testing.assert_allclose(a.bands_db, b.bands_db, atol=1e-4)
        np.testing.assert_allclose(a.dog_steps, b.dog_steps, atol=1e-6)
        np.testing.assert_allclose(a.embeddings, b.embeddings, atol=1e-4)
        assert a.patch_start_ns == b.patch_start_ns


def test_one_khz_sine_reads_its_calibrated_level() -> None:
    # RMS 0.1 is 20 dB below full scale: 120 - 20 = 100 dB on A, C and Z (0 dB at 1 kHz).
    frame = _frames(sine(1000.0, 0.1, 2.0, 48000), 48000, 48000)[1]
    for level in (frame.laeq_db, frame.lceq_db, frame.lzeq_db):
        assert level == pytest.approx(100.0, abs=0.01)


def test_lost_samples_move_capture_time_on() -> None:
    builder = FrameBuilder("dev-1", 16000, 120.0, START_NS)
    builder.push(np.zeros(8000))
    assert builder.skip(16000) == []  # nothing complete was held
    frames = builder.push(np.zeros(16000)) + builder.finish()
    assert frames[0].capture_ns == START_NS + 1_500_000_000
    assert frames[0].patch_start_ns == START_NS + 1_500_000_000  # YAMNet restarts there


def test_a_second_waits_for_the_next_two_and_lost_samples_hand_them_over() -> None:
    builder = FrameBuilder("dev-1", 16000, 120.0, START_NS)
    assert builder.push(np.zeros(16000)) == []  # the CNN needs 0.64 s of the next second
    assert builder.push(np.zeros(16000)) == []  # the speech gate, the second after that
    assert [f.seq for f in builder.push(np.zeros(16000))] == [0]
    held = builder.skip(100)
    assert [f.seq for f in held] == [1, 2]
    assert [f.dog_steps.size for f in held] == [50, 50]
    assert [f.gate for f in held] == ["quiet", "quiet"]  # digital silence: no voice, no dog


def test_every_patch_that_covers_a_step_comes_with_that_steps_frame_or_earlier() -> None:
    signal = 0.05 * np.random.default_rng(5).standard_normal(round(6.3 * 48000))
    frames = list(frames_from_samples(signal, 48000, 120.0, start_ns=START_NS))
    seen: list[int] = []
    for frame in frames:
        seen += list(frame.patch_starts_ns)
        starts = np.array(seen)
        last_centre = frame.end_ns - 10_000_000
        covering = (starts <= last_centre) & (starts + round(PATCH_S * 1e9) > last_centre)
        assert covering.any(), frame.seq
    assert np.all(np.diff(seen) == PATCH_HOP_NS) and seen[0] == START_NS


def test_the_sensors_patches_are_yamnets_own_of_the_whole_resampled_clip() -> None:
    signal = 0.05 * np.random.default_rng(6).standard_normal(3 * 48000)
    frames = list(frames_from_samples(signal, 48000, 120.0))
    resampler = StreamResampler(48000)
    dc_removed = _DcBlocker(48000).process(signal)  # the networks hear what the meter does
    whole = np.concatenate([resampler.process(dc_removed), resampler.process(np.zeros(0), True)])
    expected = cached_yamnet().run(clip_patches(whole))
    embeddings = np.concatenate([f.embeddings for f in frames])
    assert embeddings.shape == expected.embeddings.shape
    np.testing.assert_allclose(embeddings, expected.embeddings, atol=1e-4)


def test_unsupported_rate_is_refused_with_the_supported_ones() -> None:
    with pytest.raises(AudioInputError, match="16000, 32000, 44100, 48000"):
        FrameBuilder("dev-1", 22050, 120.0, START_NS)


@pytest.mark.parametrize("rate", [16000, 48000])
def test_mel_band_of_a_sine_reads_the_sine_level_at_any_rate(rate: int) -> None:
    # A 1 kHz sine at 94 dB SPL: the mel bands around 1 kHz hold (almost) all of its energy.
    features = MelFeatures(rate, 120.0)
    rows = features.process(sine(1000.0, 10 ** (-26 / 20), 1.0, rate))
    assert rows.shape == (50, 64)
    centres = mel_centre_frequencies_hz()
    near = np.abs(centres - 1000.0) < 150.0
    total_db = 10 * np.log10(np.sum(10 ** (rows[10:, near] / 10), axis=1))
    assert np.all(np.abs(total_db - 94.0) < 1.0)


def test_short_time_levels_equal_separate_meter_calls() -> None:
    rng = np.random.default_rng(3)
    second = 0.1 * rng.standard_normal(16000) * np.linspace(0.1, 1.0, 16000)
    whole = LevelMeter(16000, 120.0)
    _, steps = whole.process_steps(second, 320)
    laeq_steps, laf_steps = steps.laeq_db, steps.lafmax_db
    stepwise = LevelMeter(16000, 120.0)
    singles = [stepwise.process(second[i : i + 320]) for i in range(0, 16000, 320)]
    np.testing.assert_allclose(laeq_steps, [s.laeq_db for s in singles], atol=1e-9)
    np.testing.assert_allclose(laf_steps, [s.lafmax_db for s in singles], atol=1e-9)


def test_envelope_blocks_are_the_power_mean_and_the_maximum_of_their_steps() -> None:
    laeq, laf = envelope_blocks(np.array([50.0, 60.0, 70.0]), np.array([55.0, 72.0, 71.0]), 2)
    np.testing.assert_allclose(laeq, [10 * np.log10((1e5 + 1e6) / 2), 70.0])
    np.testing.assert_allclose(laf, [72.0, 71.0])


def test_frame_envelopes_keep_the_frames_laeq_and_lafmax() -> None:
    rng = np.random.default_rng(5)
    signal = 0.1 * rng.standard_normal(48000) * np.linspace(0.05, 1.0, 48000)
    frame = _frames(signal, 48000, 48000)[0]
    assert frame.envelope_hop_s == 0.5
    assert frame.laeq_blocks_db.shape == frame.laf_blocks_db.shape == (2,)
    # two equal halves: their power mean is the second's LAeq; the larger maximum its LAFmax
    power = np.mean(10 ** (frame.laeq_blocks_db.astype(np.float64) / 10))
    assert 10 * np.log10(power) == pytest.approx(frame.laeq_db, abs=1e-3)
    assert float(frame.laf_blocks_db.max()) == pytest.approx(frame.lafmax_db, abs=1e-3)
    assert frame.laeq_blocks_db[0] < frame.laeq_blocks_db[1] - 3.0  # a rising level


def test_dc_offset_is_removed_and_reported() -> None:
    clean = sine(1000.0, 0.1, 3.0, 48000)
    with_dc = _frames(clean + 0.05, 48000, 48000)
    without = _frames(clean, 48000, 48000)
    assert with_dc[2].dc_offset == pytest.approx(0.05, abs=1e-6)
    assert with_dc[2].lzeq_db == pytest.approx(without[2].lzeq_db, abs=0.01)


def test_exceedance_levels_over_the_window() -> None:
    # 50 s at 80 dB then 10 s at 100 dB (1 kHz, full scale 120 dB): L90 = L50 = 80, L10 = 100.
    quiet, loud = sine(1000.0, 0.01, 50.0, 16000), sine(1000.0, 0.1, 10.0, 16000)
    frames = _frames(np.concatenate([quiet, loud]), 16000, 16000)
    last = frames[-1]
    assert last.percentile_window_s == pytest.approx(60.0)
    assert last.laf90_db == pytest.approx(80.0, abs=0.05)
    assert last.laf50_db == pytest.approx(80.0, abs=0.05)
    assert last.laf10_db == pytest.approx(100.0, abs=0.05)


def test_under_range_flag_near_the_microphone_noise_floor() -> None:
    options = MeasurementOptions(noise_floor_dba=30.0, under_range_margin_db=5.0)
    quiet = FrameBuilder("dev-1", 48000, 120.0, START_NS, options=options)
    frames = quiet.push(np.concatenate([sine(1000.0, 10 ** (-88 / 20), 1.0, 48000),
                                        sine(1000.0, 10 ** (-80 / 20), 1.0, 48000)]))
    frames += quiet.finish()
    assert [f.under_range for f in frames] == [True, False]  # 32 dB and 40 dB


def test_same_input_gives_identical_frames_on_every_run() -> None:
    rng = np.random.default_rng(21)
    signal = 0.05 * rng.standard_normal(2 * 44100)
    first, second = _frames(signal, 44100, 44100), _frames(signal, 44100, 44100)
    for a, b in zip(first, second, strict=True):
        assert (a.laeq_db, a.lceq_db, a.lzeq_db, a.lafmax_db, a.lasmax_db, a.laf90_db) == (
            b.laeq_db, b.lceq_db, b.lzeq_db, b.lafmax_db, b.lasmax_db, b.laf90_db)
        np.testing.assert_array_equal(a.bands_db, b.bands_db)


def test_trainings_mel_rows_are_the_ones_the_sensors_cnn_scores() -> None:
    signal = 0.05 * np.random.default_rng(8).standard_normal(round(3.5 * 16000))
    frames = list(frames_from_samples(signal, 16000, 100.0))
    rows = mel_rows_from_samples(signal, 16000, 100.0).astype(np.float32)
    scorer = DogClassifier(cached_model(), smoothing_steps=1, min_band_level_db=CNN_GATE_DB)
    # a second (50 rows) at a time, as the CNN's inputs track a background per frame
    parts = [scorer.scores(rows[i : i + 50]) for i in range(0, len(rows), 50)]
    expected = np.concatenate([*parts, scorer.flush()])
    np.testing.assert_allclose(np.concatenate([f.dog_steps for f in frames]), expected,
                               atol=1e-6)
