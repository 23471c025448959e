"""The held-out soundscapes of benchmarks/judge_soundscapes.py: another bed for each bout, the
same clips, places and SNRs as a scene of one bed, confusers in bouts as barks come,
barking sustained for minutes, and barks under voices."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.judge_soundscapes import (
    BED_CROSSFADE_S,
    VOICED_BAND_DB,
    _bed_track,
    _held,
    confuser_scene,
    dog_scene,
    kind_of,
    sustained_scene,
)
from training.corpus import RATE


def _beds() -> list[np.ndarray]:
    """Four 4 s beds, each a tone of its own (which bed plays is its frequency)."""
    t = np.arange(4 * RATE) / RATE
    return [np.sin(2 * np.pi * f * t) * a for f, a in ((200, 0.1), (700, 1.0), (1900, 0.01),
                                                        (3300, 0.5))]


def _frequency(x: np.ndarray) -> float:
    return float(np.argmax(np.abs(np.fft.rfft(x))) * RATE / x.size)


def test_a_bed_track_changes_bed_at_each_cut_at_the_same_level_and_power() -> None:
    beds, fade = _beds(), int(BED_CROSSFADE_S * RATE)
    cuts = [20 * RATE, 40 * RATE, 60 * RATE]
    track = _bed_track(np.random.default_rng(3), beds, 80 * RATE, cuts)
    assert track.size == 80 * RATE
    pieces = [track[a + fade:b - fade] for a, b in zip([0, *cuts], [*cuts, 80 * RATE],
                                                       strict=True)]
    for piece in pieces:  # each piece one bed, at -35 dBFS RMS whatever the bed's own level
        assert 20 * np.log10(np.sqrt(np.mean(piece**2))) == pytest.approx(-35, abs=0.1)
        assert _frequency(piece) in (200, 700, 1900, 3300)
    assert len({_frequency(p) for p in pieces}) > 1
    for cut in cuts:  # equal-power crossfade: the level holds through it (two uncorrelated
        # tones, or one bed continuing into itself, within 3 dB)
        level = 20 * np.log10(np.sqrt(np.mean(track[cut - fade:cut] ** 2)))
        assert -38.1 < level < -31.9


def test_a_dog_scene_puts_the_same_barks_in_the_same_places_whatever_its_beds() -> None:
    rng = np.random.default_rng(1)
    t = np.arange(int(0.3 * RATE)) / RATE
    dogs = [np.concatenate([np.zeros(RATE // 2), np.sin(2 * np.pi * f * t) * 0.3,
                            np.zeros(RATE // 2)]) for f in rng.uniform(400, 1200, 6)]
    per_bout = dog_scene((5.0, 10.0), dogs, _beds(), seed=4)
    one_bed = dog_scene((5.0, 10.0), dogs, _beds(), seed=4, beds_per="scene")
    # each clip's region (1: its dog steps, -1: the rest of it) in the same place; which of its
    # steps stand out of the bed depends on the bed under it
    np.testing.assert_array_equal(per_bout.labels != 0, one_bed.labels != 0)
    assert per_bout.samples.size == one_bed.samples.size
    assert np.count_nonzero(per_bout.labels == 1) > 0
    # one bed looped is one frequency throughout; per bout, more than one
    seconds = [slice(s * RATE, (s + 1) * RATE) for s in range(0, per_bout.samples.size // RATE,
                                                              7)]
    assert len({_frequency(one_bed.samples[s]) for s in seconds if not per_bout.labels[
        s.start // 320:s.stop // 320].any()}) == 1
    assert len({_frequency(per_bout.samples[s]) for s in seconds if not per_bout.labels[
        s.start // 320:s.stop // 320].any()}) > 1
    with pytest.raises(ValueError, match="beds_per must be one of bout, scene"):
        confuser_scene(dogs, _beds(), 1, beds_per="clip")


def test_confuser_bouts_repeat_each_clip_2_to_4_times_from_one_place_and_hold_no_dog() -> None:
    rng = np.random.default_rng(2)
    t = np.arange(int(0.4 * RATE)) / RATE
    others = [np.sin(2 * np.pi * f * t) * 0.3 for f in rng.uniform(400, 1200, 5)]
    labels = [f"kind-{k}" for k in range(5)]
    scene = confuser_scene(others, [np.zeros(4 * RATE)], seed=3, labels=labels, bouts=True)
    assert scene.name == "confuser bouts" and kind_of(scene) == "confuser bouts scene"
    assert not scene.labels.any()  # nothing in it is a dog
    by_kind = {k: [(a, b) for a, b, label in scene.placed if label == k] for k in labels}
    for placed in by_kind.values():
        assert 2 <= len(placed) <= 4
        gaps = [b0 - a1 for (_, a1), (b0, _) in zip(placed[:-1], placed[1:], strict=True)]
        assert all(0.5 <= g <= 3.0 + 1e-9 for g in gaps)
        # one place, one level: every repeat the same samples (the bed is silent here)
        copies = [scene.samples[round(a * RATE):round(a * RATE) + t.size] for a, _ in placed]
        for copy in copies[1:]:
            np.testing.assert_allclose(copy, copies[0], atol=1e-12)
    starts = [a for a, _, _ in scene.placed]
    assert starts == sorted(starts)
    assert kind_of(confuser_scene(others, [np.zeros(4 * RATE)], 3)) == "confuser scene"


def test_sustained_barking_is_four_bouts_of_3_to_8_minutes_of_barks_half_to_3_s_apart() -> None:
    rng = np.random.default_rng(5)
    t = np.arange(int(0.4 * RATE)) / RATE
    dogs = [np.sin(2 * np.pi * f * t) * 0.3 for f in rng.uniform(400, 1200, 6)]
    scene = sustained_scene(dogs, _beds(), seed=2)
    assert scene.name == "sustained barking" and kind_of(scene) == "sustained barking scene"
    step = scene.samples.size / scene.labels.size / RATE
    sounding = np.flatnonzero(np.diff(np.concatenate([[0], scene.labels != 0, [0]])))
    clips = sounding.reshape(-1, 2) * step  # (start s, end s) of each placed bark
    gaps = clips[1:, 0] - clips[:-1, 1]
    breaks = np.flatnonzero(gaps > 30.0)
    assert breaks.size == 3  # four bouts, 60-90 s of bed between them (less the 20 ms steps)
    assert np.all((gaps[breaks] > 59.0) & (gaps[breaks] < 91.0))
    inside = np.delete(gaps, breaks)
    assert inside.min() > 0.5 - 0.05 and inside.max() < 3.0 + 0.05
    for bout in np.split(clips, breaks + 1):
        assert 180.0 <= bout[-1, 1] - bout[0, 0] <= 480.0 + 0.5
    assert np.count_nonzero(scene.labels == 1) > 0.5 * np.count_nonzero(scene.labels)


def test_a_long_bout_is_held_only_by_one_chain_of_events_over_nine_tenths_of_it() -> None:
    bout = (100.0, 400.0)
    assert _held(bout, [(100.0, 110.0), (160.0, 200.0), (250.0, 380.0)])  # gaps 50 s: 280 s
    assert not _held(bout, [(100.0, 110.0), (180.0, 200.0), (250.0, 380.0)])  # a 70 s gap
    assert not _held(bout, [(100.0, 360.0)])  # 260 s of 300: under nine tenths
    assert _held(bout, [(50.0, 450.0)])  # clipped to the bout
    assert not _held(bout, [(0.0, 99.0), (401.0, 500.0)]) and not _held(bout, [])


def test_barks_under_voices_keep_the_dog_scenes_barks_with_a_voice_over_each_clip() -> None:
    """The barks under voices scene is the dog scene of its band with the same clips, places,
    labels and SNRs, plus one voice over each clip that starts up to 0.5 s before it, the clip
    0-10 dB over the voice; the voices are not labelled."""
    rng = np.random.default_rng(6)
    t = np.arange(int(0.3 * RATE)) / RATE
    dogs = [np.sin(2 * np.pi * f * t) * 0.3 for f in rng.uniform(400, 1200, 6)]
    voice = np.sin(2 * np.pi * 150 * np.arange(RATE) / RATE) * 0.2  # a 1 s "voice" at 150 Hz
    beds = [np.zeros(4 * RATE)]  # silent: the scene is the barks and the voices alone
    plain = dog_scene(VOICED_BAND_DB, dogs, beds, seed=4)
    voiced = dog_scene(VOICED_BAND_DB, dogs, beds, seed=4, voices=[voice])
    assert voiced.name == "barks under voices" and kind_of(voiced) == "barks under voices scene"
    np.testing.assert_array_equal(voiced.labels, plain.labels)
    np.testing.assert_array_equal(voiced.own_snr, plain.own_snr)
    spoken = [(a, b) for a, b, label in voiced.placed if label == "speech"]
    assert len(spoken) == len(dogs)
    added = voiced.samples - plain.samples
    clips = np.flatnonzero(np.diff(np.concatenate([[0], plain.labels != 0, [0]])))
    step = plain.samples.size / plain.labels.size / RATE
    for (a, b), (first, _) in zip(spoken, clips.reshape(-1, 2), strict=True):
        onset = first * step
        assert onset - 0.5 - step <= a <= onset + step and b - a == pytest.approx(1.0)
        piece = added[round(a * RATE):round(b * RATE)]
        bark = plain.samples[round(onset * RATE):round(onset * RATE) + t.size]
        over_db = 20 * np.log10(np.sqrt(np.mean(bark**2)) / np.sqrt(np.mean(piece**2)))
        assert -0.5 <= over_db <= 10.5  # the placed clip's RMS over the voice's
