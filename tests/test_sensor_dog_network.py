"""The sensor's fine-tuned dog network (models/dog_yamnet.onnx, issue 39): known answers on real
clips at the event threshold of the v5 head (models/dog_head.v5.npz). A bark 30 m away in a
city street scores over the threshold; speech, a cat, a rooster, a tone and digital silence
stay under it. And the same input gives the same events on every run, through the pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from analyzer.config import DetectorSettings
from analyzer.detect import DevicePipeline
from analyzer.detect.head import DogHead
from sensor.frames import frames_from_samples
from sensor.yamnet_features import clip_patches
from sensor.yamnet_network import YamnetNetwork
from training.finetune import at_distance

DATA = Path(__file__).resolve().parent / "data"
RATE = 16_000


@pytest.fixture(scope="module")
def network() -> YamnetNetwork:
    return YamnetNetwork()


V5_HEAD = Path(__file__).resolve().parents[1] / "models" / "dog_head.v5.npz"


@pytest.fixture(scope="module")
def head() -> DogHead:
    """The head that builds events from the sensor's fine-tuned scores alone (``[detector]
    head_path = "models/dog_head.v5.npz"``; the bundled default fuses them with the CNN)."""
    return DogHead.load(V5_HEAD)


def clip(name: str) -> np.ndarray:
    samples, rate = sf.read(DATA / name, dtype="float64")
    assert rate == RATE
    return samples


def tuned_score(network: YamnetNetwork, samples: np.ndarray) -> float:
    scores = network.fine_tuned_dog_scores(network.run(clip_patches(samples)))
    assert scores is not None
    return float(scores.max())


def bark_far_away(snr_db: float) -> np.ndarray:
    """Lugaru's bark three times, 1.5 s apart, heard 30 m away over grass, in the street
    ambience at ``snr_db`` (RMS of the barks' span over the ambience's)."""
    bark = clip("lugaru_bark2.flac")
    street = clip("sonyc_street_ambience_01_027029.flac")[: 6 * RATE]
    barks = np.zeros(street.size)
    for k in range(3):
        at = RATE + k * 3 * RATE // 2
        barks[at:at + bark.size] += bark
    far = at_distance(barks, 30.0, 0.75)
    span = slice(RATE, 4 * RATE)
    gain = np.std(street) / np.std(far[span]) * 10 ** (snr_db / 20)
    return street + gain * far


def test_the_v5_head_decides_from_the_sensors_fine_tuned_scores(
    network: YamnetNetwork, head: DogHead
) -> None:
    assert network.fine_tuned and head.sensor_scores and head.kind == "head"
    assert head.on_threshold is not None and head.off_threshold is not None


@pytest.mark.parametrize("snr_db", [0.0, 10.0])
def test_a_bark_30_m_away_in_a_city_street_scores_over_the_threshold(
    network: YamnetNetwork, head: DogHead, snr_db: float
) -> None:
    assert head.on_threshold is not None
    assert tuned_score(network, bark_far_away(snr_db)) >= head.on_threshold
    # and the street alone does not
    assert tuned_score(network, clip("sonyc_street_ambience_01_027029.flac")) < head.on_threshold


@pytest.mark.parametrize(
    "name", ["allison_vm_login_speech.flac", "modsounds_cat_meow.flac", "modsounds_rooster.flac"])
def test_speech_a_cat_and_a_rooster_stay_under_the_threshold(
    network: YamnetNetwork, head: DogHead, name: str
) -> None:
    assert head.on_threshold is not None
    assert tuned_score(network, clip(name)) < head.on_threshold


def test_a_tone_and_digital_silence_stay_under_the_threshold(
    network: YamnetNetwork, head: DogHead
) -> None:
    assert head.on_threshold is not None
    t = np.arange(3 * RATE) / RATE
    assert tuned_score(network, 0.3 * np.sin(2 * np.pi * 1000 * t)) < head.on_threshold
    assert tuned_score(network, np.zeros(3 * RATE)) < head.on_threshold


def test_the_same_input_gives_the_same_events_on_every_run(head: DogHead) -> None:
    samples = bark_far_away(10.0)
    first = events_of(head, samples)
    assert first, "the barks 30 m away make an event"
    assert events_of(head, samples) == first


V5_FUSED_HEAD = Path(__file__).resolve().parents[1] / "models" / "dog_head.v5-fused.npz"


def events_of(head: DogHead, samples: np.ndarray) -> list[tuple[int, int, float]]:
    pipeline = DevicePipeline("dev-1", DetectorSettings(), head)
    found = []
    for frame in frames_from_samples(samples, RATE, 100.0, device_id="dev-1"):
        found += pipeline.feed(frame).events
    found += pipeline.finish().events
    return [(e.onset_ns, e.offset_ns, e.confidence) for e in found]


def in_the_street(samples: np.ndarray, snr_db: float = 10.0) -> np.ndarray:
    """``samples`` from 1 s on, 20 m away, in the street ambience at ``snr_db``."""
    street = clip("sonyc_street_ambience_01_027029.flac")[: 6 * RATE]
    placed = np.zeros(street.size)
    n = min(samples.size, street.size - RATE)
    placed[RATE:RATE + n] = samples[:n]
    far = at_distance(placed, 20.0, 0.75)
    gain = np.std(street) / np.std(far[RATE:RATE + n]) * 10 ** (snr_db / 20)
    return street + gain * far


def test_the_fused_v5_head_finds_barks_30_m_away_and_not_a_cat_or_a_rooster() -> None:
    """models/dog_head.v5-fused.npz: the CNN's score and the fine-tuned patch score fused in
    log-odds (benchmarks/judge_soundscapes.py --write-head), through the analyzer's pipeline."""
    head = DogHead.load(V5_FUSED_HEAD)
    assert head.sensor_scores and head.kind == "logistic"
    assert events_of(head, bark_far_away(10.0)), "the barks 30 m away make an event"
    for name in ("allison_vm_login_speech.flac", "modsounds_cat_meow.flac",
                 "modsounds_rooster.flac"):
        assert events_of(head, in_the_street(clip(name))) == [], name
    assert events_of(head, clip("sonyc_street_ambience_01_027029.flac")) == []
    t = np.arange(3 * RATE) / RATE
    assert events_of(head, 0.3 * np.sin(2 * np.pi * 1000 * t)) == []
    assert events_of(head, np.zeros(3 * RATE)) == []


def test_the_analyzer_fuses_with_the_v5_head_unless_told_otherwise() -> None:
    # issue 39: the bundled detector is the fused one; the sensor's own head (pd) stays v4
    pipeline = DevicePipeline("dev-1", DetectorSettings())
    assert pipeline.head.version == DogHead.load(V5_FUSED_HEAD).version
    assert pipeline.head.sensor_scores and pipeline.head.kind == "logistic"
    assert (pipeline.head.on_threshold, pipeline.head.off_threshold) == (0.9, 0.7)
    # the event verifier (the default) finds candidates at its own thresholds and judges them
    assert pipeline.verifier is not None
    assert (pipeline.settings.on_threshold, pipeline.settings.off_threshold) == (0.3, 0.2)
    samples = bark_far_away(10.0)
    assert events_of(pipeline.head, samples) == events_of(DogHead.load(V5_FUSED_HEAD), samples)
