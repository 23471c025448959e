"""The word and voice attack suite (issue 34, item 3): its stream, its features, its classifier.

Known answers only: an utterance lies where the plan says and reads the level it was given on
the sensor's own meter; the floor reads its level; a wire field group that is empty gives the
classifier nothing (exactly chance on balanced classes); the classifier finds a separable toy
set completely and nothing in shuffled labels. Training on the whole corpus is a command
(``barkwatch-train privacy --attack words``, docs/PRIVACY.md), not a test.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import soundfile

from sensor.levels import LevelMeter
from training.cli import main
from training.privacy_attacks import cross_validated, leave_one_out, standardised_within
from training.privacy_features import (
    FRAMES,
    PATCH_SLOTS,
    Features,
    features_of_frames,
    load_features,
    save_features,
)
from training.privacy_stream import (
    StreamConditions,
    Utterance,
    laeq_db,
    plan_stream,
    stream_blocks,
    stream_seconds,
)

FIXTURE = Path(__file__).parent / "fixtures" / "speech-conf-getconfno.wav"
RATE = 48_000


@pytest.fixture(scope="module")
def speech() -> Utterance:
    audio, rate = soundfile.read(FIXTURE, dtype="float64", always_2d=True)
    return Utterance("getconfno", "conference", "allison", "allison", audio.mean(axis=1), rate)


def whole_stream(utterances: list[Utterance], conditions: StreamConditions) -> np.ndarray:
    placements = plan_stream(utterances, conditions)
    return np.concatenate(list(stream_blocks(utterances, placements, conditions)))


def meter_laeq(stream: np.ndarray, start: int, stop: int) -> float:
    """LAeq over stream[start:stop] on the sensor's meter, its filters run from the start."""
    meter = LevelMeter(RATE, 120.0)
    if start:
        meter.process(stream[:start])
    return meter.process(stream[start:stop]).laeq_db


def test_an_utterance_starts_at_its_planned_offset(speech: Utterance) -> None:
    conditions = StreamConditions(speech_db=70.0, floor_db=None, seed=3)
    placements = plan_stream([speech, speech], conditions)
    stream = whole_stream([speech, speech], conditions)
    for placement in placements:
        slot = stream[placement.slot_start_s * RATE : (placement.slot_start_s + placement.slot_s)
                      * RATE]  # fmt: skip
        onset = placement.onset_sample - placement.slot_start_s * RATE
        assert np.flatnonzero(slot)[0] == onset
        assert np.flatnonzero(slot)[-1] < onset + placement.n_samples
        assert 1.0 <= placement.onset_s - placement.slot_start_s < 2.0  # in the second second


def test_an_utterance_reads_its_stated_level_on_the_sensors_meter(speech: Utterance) -> None:
    for level in (70.0, 55.0):
        conditions = StreamConditions(speech_db=level, floor_db=None, seed=1)
        (placement,) = plan_stream([speech], conditions)
        stream = whole_stream([speech], conditions)
        start = placement.onset_sample
        measured = meter_laeq(stream, start, start + placement.n_samples)
        assert abs(measured - level) < 0.5


def test_the_floor_reads_its_stated_level_between_utterances(speech: Utterance) -> None:
    for floor in (35.0, 45.0):
        conditions = StreamConditions(speech_db=70.0, floor_db=floor, seed=2)
        placements = plan_stream([speech, speech], conditions)
        stream = whole_stream([speech, speech], conditions)
        lead = placements[1].slot_start_s * RATE  # the second slot's first second: floor only
        assert abs(meter_laeq(stream, lead, lead + RATE) - floor) < 0.5
        assert abs(laeq_db(stream[lead : lead + RATE], RATE) - floor) < 0.5


def test_the_stream_is_the_same_for_a_seed_and_differs_for_another(speech: Utterance) -> None:
    same = StreamConditions(floor_db=35.0, seed=5)
    first, again = whole_stream([speech] * 3, same), whole_stream([speech] * 3, same)
    other = whole_stream([speech] * 3, dataclasses.replace(same, seed=6))
    assert np.array_equal(first, again)
    assert first.size != other.size or not np.array_equal(first, other)


@dataclasses.dataclass(frozen=True)
class WireLikeFrame:
    """The shape of a decoded frame as the features see it: any dataclass of such fields."""

    capture_ns: int
    patch_start_ns: int
    laeq_db: float
    bands_db: np.ndarray
    embeddings: np.ndarray
    model_versions: str = "test"
    hop_s: float = 0.02
    dog_steps: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.float32))


def gated_frames(utterances: list[Utterance], seconds: int) -> list[WireLikeFrame]:
    """Frames whose level and bands follow the second's index and that carry no embeddings,
    as a wire that withholds them (issue 34's speech gate) sends them."""
    return [WireLikeFrame(k * 10**9, k * 10**9, 40.0 + k % 7, np.full(3, float(k)),
                          np.zeros((0, 1024), np.float32)) for k in range(seconds)]  # fmt: skip


def balanced_utterances() -> list[Utterance]:
    return [Utterance(f"{w}_{s}_{i}", str(w), f"speaker{s}", f"speaker{s}",
                      np.ones(8000), 16_000)
            for s in range(3) for w in range(4) for i in range(2)]  # fmt: skip


def test_a_group_the_wire_leaves_empty_is_zeros_and_scores_exactly_chance() -> None:
    utterances = balanced_utterances()
    conditions = StreamConditions(floor_db=None, seed=1)
    placements = plan_stream(utterances, conditions)
    seconds = stream_seconds(placements)
    features = features_of_frames(gated_frames(utterances, seconds), utterances, placements, 3)
    assert not features.carried("embeddings")
    assert not np.any(features.matrix("embeddings"))
    assert features.carried("bands+envelopes+levels")
    assert features.fields["bands_db"].shape == (len(utterances), 3 * FRAMES)
    assert features.fields["embeddings"].shape[0] == len(utterances)
    figures = cross_validated(features.matrix("embeddings"), features.words,
                              leave_one_out(features.speakers), "logreg", seed=1)  # fmt: skip
    assert figures["mean"] == pytest.approx(0.25)  # four balanced words: one in four


def test_an_utterances_frames_are_those_from_its_onset() -> None:
    utterances = balanced_utterances()
    placements = plan_stream(utterances, StreamConditions(floor_db=None, seed=4))
    seconds = stream_seconds(placements)
    frames = gated_frames(utterances, seconds)
    features = features_of_frames(frames, utterances, placements, 3)
    for placement in placements:
        first = int(placement.onset_s)
        bands = features.fields["bands_db"][placement.index]
        assert list(bands[::3]) == [float(first + j) for j in range(FRAMES)]


def test_patches_land_in_the_slot_their_start_time_says() -> None:
    utterances = balanced_utterances()[:1]
    (placement,) = plan_stream(utterances, StreamConditions(floor_db=None, seed=1))
    frames = [WireLikeFrame(k * 10**9, k * 10**9 + 120_000_000, 50.0, np.zeros(3),
                            np.full((2, 1024), k + 1.0, np.float32)) for k in range(3)]  # fmt: skip
    features = features_of_frames(frames, utterances, placements=[placement], wire_version=3)
    slots = features.fields["embeddings"][0].reshape(PATCH_SLOTS, 1024)[:, 0]
    starts = [k + 0.12 + 0.48 * i for k in range(3) for i in range(2)]
    expected = np.zeros(PATCH_SLOTS)
    for start, value in zip(starts, [k + 1.0 for k in range(3) for _ in range(2)], strict=True):
        slot = int((start - (placement.onset_s - 0.96)) / 0.48)
        if 0 <= start - (placement.onset_s - 0.96) < 1.92:
            expected[min(slot, PATCH_SLOTS - 1)] = value
    assert list(slots) == list(expected)


def test_a_time_series_is_aligned_on_the_onset_step_by_step() -> None:
    utterances = balanced_utterances()
    placements = plan_stream(utterances, StreamConditions(floor_db=None, seed=7))
    seconds = stream_seconds(placements)
    frames = [dataclasses.replace(frame, dog_steps=np.arange(50, dtype=np.float32) + 50 * k)
              for k, frame in enumerate(gated_frames(utterances, seconds))]  # each: its step
    features = features_of_frames(frames, utterances, placements, 3)
    for placement in placements:
        steps = features.fields["dog_steps"][placement.index]  # 2 s from 0.5 s before onset
        assert steps.size == 100 and np.all(np.diff(steps) == 1.0)
        first_s = steps[0] * 0.02
        assert placement.onset_s - 0.5 - 1e-6 <= first_s < placement.onset_s - 0.48


def test_features_survive_their_cache(tmp_path: Path) -> None:
    utterances = balanced_utterances()
    placements = plan_stream(utterances, StreamConditions(floor_db=None, seed=1))
    seconds = stream_seconds(placements)
    features = features_of_frames(gated_frames(utterances, seconds), utterances, placements, 3)
    save_features(features, tmp_path / "f.npz")
    again: Features = load_features(tmp_path / "f.npz")
    assert again.words == features.words and again.scalar == features.scalar
    assert all(np.array_equal(again.fields[k], v) for k, v in features.fields.items())


def toy_set(seed: int) -> tuple[np.ndarray, list[str], list[str]]:
    """Ten words said five times by each of six speakers; a word's vector is its one-hot code
    plus a little noise (separable)."""
    rng = np.random.default_rng(seed)
    words = [str(w) for _ in range(6) for w in range(10) for _ in range(5)]
    speakers = [f"s{s}" for s in range(6) for _ in range(50)]
    x = np.eye(10)[[int(w) for w in words]] + rng.normal(0, 0.05, (300, 10))
    return x, words, speakers


def test_the_classifier_recognises_a_separable_toy_set_completely() -> None:
    x, words, speakers = toy_set(1)
    figures = cross_validated(x, words, leave_one_out(speakers), "logreg", seed=1)
    assert figures["mean"] == 1.0 and set(figures["per_fold"]) == {f"s{s}" for s in range(6)}


def test_the_classifier_learns_nothing_from_shuffled_labels() -> None:
    x, words, speakers = toy_set(2)
    figures = cross_validated(x, words, leave_one_out(speakers), "logreg", seed=2, shuffled=True)
    assert figures["pooled"] < 0.2  # chance 0.1; 300 test rows


def test_standardising_within_speakers_takes_out_each_speakers_channel() -> None:
    x, words, speakers = toy_set(3)
    shifted = x + np.repeat(np.arange(6.0), 50)[:, None] * 5.0  # a gain per speaker's channel
    adapted = standardised_within(shifted, speakers)
    for s in range(6):
        rows = adapted[s * 50 : (s + 1) * 50]
        assert np.allclose(rows.mean(axis=0), 0.0) and np.allclose(rows.std(axis=0), 1.0, 1e-4)
    assert cross_validated(adapted, words, leave_one_out(speakers), "logreg", 1)["mean"] == 1.0


def test_the_command_refuses_a_floor_without_a_speech_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "manifest.csv").write_text("clip_id,word,speaker,file\n")
    with pytest.raises(SystemExit) as exit_:
        main(["privacy", "--attack", "words", "--corpus", str(tmp_path), "--floor", "40"])
    assert exit_.value.code == 2
    assert "--floor 40: give --speech-db" in capsys.readouterr().err


def test_the_commands_help_says_what_each_attack_option_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["privacy", "--help"])
    text = capsys.readouterr().out
    for option in ("--attack", "--floor", "--speech-db", "--voices", "--classifier",
                   "--group", "--cache-dir", "--limit", "--no-control", "--no-adapt"):  # fmt: skip
        assert option in text


def test_a_streams_features_come_from_the_sensors_decoded_frames(speech: Utterance) -> None:
    from training.privacy_features import stream_features

    utterances = [speech, dataclasses.replace(speech, clip_id="again")]
    conditions = StreamConditions(speech_db=70.0, floor_db=35.0, seed=1)
    placements = plan_stream(utterances, conditions)
    seen: list[float] = []
    features = stream_features(utterances, placements, conditions,
                               progress=lambda done, total: seen.append(done))  # fmt: skip
    assert seen[-1] == stream_seconds(placements)  # one decoded frame per second
    levels = features.fields["laeq_db"]  # the frames from each onset: speech over the floor
    assert levels.shape == (2, FRAMES) and np.all(levels.max(axis=1) > 55.0)
    assert features.carried("levels") and features.carried("all")
    assert sum(features.frame_kinds.values()) == 2 * FRAMES  # each frame's kind counted
