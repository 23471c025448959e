"""The speech gate (issue 34, wire v4) on fixed recorded clips through the sensor's own code: a
voice in a city street leaves the sensor as levels only, even where the small CNN alone would
call it a dog; barks 30 m away leave whole; a bark over a voice leaves whole (the dog
decides); a candidate leaves as dog scores where no one speaks if configured, and as levels
under a voice; the street alone leaves as levels with its background statistics; and the
analyzer finds the same events in gated frames as in frames that carry everything."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgpack
import numpy as np
import pytest
import soundfile as sf

from analyzer.config import DetectorSettings
from analyzer.detect import DevicePipeline
from sensor.frames import frames_from_samples
from sensor.gate import BackgroundStatistics, GateSettings
from sensor.wire import (
    GATE_DOG,
    GATE_LEVELS,
    GATE_QUIET,
    GATE_SCORES,
    GATE_SPEECH,
    Frame,
    decode_frame,
    encode_frame,
)
from tests.test_sensor_dog_network import bark_far_away

DATA = Path(__file__).resolve().parent / "data"
RATE = 16_000
FULL_SCALE_DB = 110.0  # the street's RMS reads about 55 dB(A), a voice over it about 70


def clip(name: str) -> np.ndarray:
    samples, rate = sf.read(DATA / name, dtype="float64")
    assert rate == RATE
    return samples


def voice_in_street(snr_db: float = 15.0) -> np.ndarray:
    """The 2.5 s prompt (one woman's voice) from 1.5 s into 6 s of street ambience, its RMS
    ``snr_db`` over the street's."""
    street = clip("sonyc_street_ambience_01_027029.flac")[: 6 * RATE]
    voice = clip("allison_vm_login_speech.flac")
    placed = np.zeros(street.size)
    at = 3 * RATE // 2
    placed[at:at + voice.size] = voice
    gain = np.std(street) / np.std(voice) * 10 ** (snr_db / 20)
    return street + gain * placed


def frames_of(samples: np.ndarray) -> list[Frame]:
    return list(frames_from_samples(samples, RATE, FULL_SCALE_DB, "gate-1", 0))


def test_a_voice_in_the_street_leaves_as_levels_only() -> None:
    frames = frames_of(voice_in_street())
    gates = [f.gate for f in frames]
    # the voice spans 1.5-4.0 s: seconds 1-3 hold it; the second before and after are held over
    assert gates[1:5] == [GATE_SPEECH] * 4, gates
    assert GATE_DOG not in gates
    for frame in frames[1:5]:
        raw = msgpack.unpackb(encode_frame(frame), raw=False)
        assert raw["g"] == GATE_LEVELS  # speech is not told from quiet on the wire
        assert not {"bands", "laeq_s", "laf_s", "dog_s", "pd", "dg", "lc", "lz", "emb",
                    "ys"} & set(raw)
        assert raw["la"] == pytest.approx(frame.laeq_db)


def test_a_voice_the_small_cnn_scores_as_a_dog_still_leaves_as_levels() -> None:
    """Wire v3 opened the gate on the CNN alone (0.3): at 5 dB over the street this voice
    reaches 0.38 there; the detectors' fused scores stay far below, so nothing leaves."""
    frames = frames_of(voice_in_street(5.0))
    assert max(float(f.dog_steps.max()) for f in frames) >= 0.3
    assert GATE_DOG not in [f.gate for f in frames]


def test_barks_30_m_away_leave_whole_and_the_street_alone_without_scores() -> None:
    frames = frames_of(bark_far_away(10.0))  # barks at 1.0, 2.5 and 4.0 s
    gates = [f.gate for f in frames]
    assert gates[1:5] == [GATE_DOG] * 4, gates
    street = frames_of(clip("sonyc_street_ambience_01_027029.flac")[: 6 * RATE])
    assert {f.gate for f in street} == {GATE_QUIET}, [f.gate for f in street]


def test_the_background_statistics_are_the_l90_of_the_bark_free_seconds_bands() -> None:
    """Brute-force reference: per band, the 10th percentile of the band levels of the seconds
    without dog activity of their own, over the last 600 s; first after 10 s, then each
    minute, and with the last frame of the stream."""
    street = clip("sonyc_street_ambience_01_027029.flac")
    frames = frames_of(np.concatenate([street, street[: 3 * RATE]]))  # 13 s, no dog
    assert {f.gate for f in frames} <= {GATE_QUIET, GATE_SPEECH}
    carried = [(i, f.background) for i, f in enumerate(frames) if f.background is not None]
    assert [i for i, _ in carried] == [BackgroundStatistics.FIRST_S, len(frames) - 1]
    for i, stats in carried:
        # the frame after a span (index FIRST_S) does not count itself; the last one does
        seconds = frames[:i] if i == BackgroundStatistics.FIRST_S else frames
        expected = np.percentile(np.stack([f.bands_db for f in seconds]), 10.0, axis=0)
        assert stats.seconds == len(seconds) and stats.start_ns == 0
        np.testing.assert_allclose(stats.bands_db, expected, atol=1e-4)
        back = decode_frame(encode_frame(frames[i])).background
        assert back is not None and back.seconds == stats.seconds
        np.testing.assert_array_equal(back.bands_db, stats.bands_db)


def test_background_statistics_leave_out_the_dogs_seconds() -> None:
    frames = frames_of(bark_far_away(10.0))
    stats = frames[-1].background
    assert stats is not None
    own_dog = [f for f in frames if f.gate == GATE_DOG]
    assert stats.seconds < len(frames) and len(own_dog) >= 4


def test_a_bark_over_a_voice_leaves_whole() -> None:
    voice = voice_in_street(10.0)
    barks = bark_far_away(15.0) - clip("sonyc_street_ambience_01_027029.flac")[: 6 * RATE]
    frames = frames_of(voice + barks)
    assert [f.gate for f in frames][1:5] == [GATE_DOG] * 4


def test_the_analyzer_finds_the_same_events_in_gated_frames() -> None:
    # 10 s of street, then the barks in it: quiet seconds before and around them
    frames = frames_of(np.concatenate([clip("sonyc_street_ambience_01_027029.flac"),
                                       bark_far_away(10.0)]))

    def events(sent: list[Frame]) -> list[tuple[int, int, str]]:
        pipeline = DevicePipeline("gate-1", DetectorSettings())
        found = [e for f in sent for e in pipeline.feed(decode_frame(encode_frame(f))).events]
        found += pipeline.finish().events
        return [(e.onset_ns, e.offset_ns, e.label) for e in found]

    gated = events(frames)
    whole = events([dataclasses.replace(f, gate=GATE_DOG) for f in frames])
    assert {GATE_QUIET, GATE_DOG} <= {f.gate for f in frames}
    assert gated == whole and len(gated) >= 1


def test_each_detector_counts_as_dog_activity_from_its_own_off_threshold_less_the_margin() -> None:
    """A step under a detector's off-threshold lies in none of its events: the gate opens for
    it from that threshold less ``event_margin`` (never under ``fused_threshold``); a head
    without event thresholds (untouched YAMNet) opens at ``fused_threshold``."""
    from sensor.dog_head import DogHead
    from sensor.gate import GateSettings, SpeechGate
    from sensor.yamnet_network import dog_class_indices, load_class_names

    names = tuple(load_class_names())
    strict = DogHead(version="strict", fusion_kind="head", on_threshold=0.95, off_threshold=0.8)
    loose = DogHead(version="loose", fusion_kind="head", on_threshold=0.6, off_threshold=0.4)
    gate = SpeechGate(names, dog_class_indices(names), GateSettings(), head=DogHead(),
                      tuned=(strict, loose))  # fmt: skip
    assert gate.thresholds == pytest.approx((0.5, 0.7, 0.5))
    frame = frames_of(clip("sonyc_street_ambience_01_027029.flac")[:RATE])[0]
    assert not gate._dog_activity(frame, (0.0, 0.69, 0.0))
    assert gate._dog_activity(frame, (0.0, 0.71, 0.0))
    assert gate._dog_activity(frame, (0.5, 0.0, 0.0))
    assert not gate._dog_activity(frame, (0.49, 0.69, 0.49))


def test_the_verifiers_candidates_are_the_same_in_gated_frames() -> None:
    """A faint bark in the street, 28 dB under it: every candidate the default event verifier
    is given in the frames that carry everything is there in the gated frames (no one speaks
    there; where someone does, the gate can withhold a candidate: docs/PRIVACY.md)."""
    from analyzer.detect.verifier import BUNDLED_VERIFIER_PATH, VerifierModel
    from training.finetune import at_distance

    street = clip("sonyc_street_ambience_01_027029.flac")
    bark = at_distance(clip("lugaru_bark2.flac"), 30.0, 0.75)
    at = 4 * RATE + RATE // 3
    street[at:at + bark.size] += np.std(street) / np.std(bark) * 10 ** (-28 / 20) * bark
    frames = frames_of(street)
    bundled = VerifierModel.load(BUNDLED_VERIFIER_PATH)
    every = VerifierModel.keeping_all(bundled.on_threshold, bundled.off_threshold)

    def candidates(sent: list[Frame]) -> list[tuple[int, int]]:
        pipeline = DevicePipeline("gate-1", DetectorSettings(), verifier=every)
        found = [e for f in sent for e in pipeline.feed(decode_frame(encode_frame(f))).events]
        found += pipeline.finish().events
        return [(e.onset_ns, e.offset_ns) for e in found]

    gated = candidates(frames)
    assert GATE_QUIET in [f.gate for f in frames] and GATE_DOG in [f.gate for f in frames]
    assert gated == candidates([dataclasses.replace(f, gate=GATE_DOG) for f in frames])
    assert len(gated) == 1
    # the dog seconds sent as "scores" frames (dog scores, no spectrum): the same candidate
    scores = [dataclasses.replace(f, gate=GATE_SCORES) if f.gate == GATE_DOG else f
              for f in frames]
    assert candidates(scores) == gated


def regated(frames: list[Frame], settings: GateSettings) -> list[Frame]:
    """``frames`` decided again by a gate with ``settings`` (YAMNet's outputs are in them)."""
    from sensor.gate import SpeechGate
    from sensor.yamnet_network import dog_class_indices, load_class_names

    names = tuple(load_class_names())
    gate = SpeechGate(names, dog_class_indices(names), settings)
    return gate.push(frames) + gate.flush()


def test_a_candidate_leaves_as_dog_scores_where_no_one_speaks_and_as_levels_under_a_voice(
) -> None:
    """A gate that sends candidates (``candidate_scores``) and counts every step as one
    (``candidate_threshold`` 0.01) and none as dog activity: the street's seconds leave as
    "scores" frames, the voice's seconds and their neighbours as levels (which voice seconds
    reach a candidate's score told voices apart: docs/PRIVACY.md); by default (no
    ``candidate_scores``) the street leaves as levels."""
    everything = GateSettings(candidate_scores=True, candidate_threshold=0.01,
                              fused_threshold=0.99, event_margin=0.0, yamnet_dog_threshold=0.99)
    street = clip("sonyc_street_ambience_01_027029.flac")[: 6 * RATE]
    frames = regated(frames_of(np.concatenate([street, voice_in_street()])), everything)
    gates = [f.gate for f in frames]
    assert gates[:6] == [GATE_SCORES] * 6, gates
    assert gates[7:11] == [GATE_SPEECH] * 4, gates
    default = GateSettings(fused_threshold=0.99, event_margin=0.0, yamnet_dog_threshold=0.99)
    assert {f.gate for f in regated(frames_of(street), default)} == {GATE_QUIET}


def test_the_candidates_detector_is_the_analyzers_default_head() -> None:
    from analyzer.detect.head import ANALYZER_HEAD_PATH
    from sensor.gate import CANDIDATE_HEAD_FILE

    assert ANALYZER_HEAD_PATH.name == CANDIDATE_HEAD_FILE
