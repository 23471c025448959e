"""The bundled dog head (models/dog_head.npz) on known answers, through YAMNet, the CNN and the
fusion exactly as the sensor and analyzer run them: a bark scores above the event threshold;
speech, a tone and digital silence stay under the lower one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from analyzer.detect import DogHead, step_head_scores
from analyzer.detect.head import DEFAULT_HEAD_PATH
from analyzer.detect.settings import DetectorSettings
from analyzer.offline.analysis import analyze_file
from training.head_data import Scorers
from training.head_eval import spans_of

DATA = Path(__file__).resolve().parent / "data"
SR = 16_000


@pytest.fixture(scope="module")
def scorers() -> Scorers:
    return Scorers()


@pytest.fixture(scope="module")
def head() -> DogHead:
    return DogHead.load()


def fused_scores(scorers: Scorers, head: DogHead, samples: np.ndarray) -> np.ndarray:
    """The fused dog score of every 20-ms step of ``samples`` (16 kHz)."""
    emb, ys, cnn = scorers.run(samples)
    patches = head.patch_scores(emb, ys)
    return head.fuse(cnn, step_head_scores(np.arange(len(patches)) * 0.48, patches, cnn.size))


def test_the_bundled_head_is_a_trained_one_with_its_thresholds(head: DogHead) -> None:
    assert DEFAULT_HEAD_PATH.is_file()
    assert head.version.startswith("dog-head-") and head.layers
    assert head.on_threshold is not None and head.off_threshold is not None
    assert head.off_threshold < head.on_threshold


def test_a_bark_in_quiet_background_noise_scores_above_the_on_threshold(
    scorers: Scorers, head: DogHead
) -> None:
    bark, rate = sf.read(DATA / "lugaru_bark2.flac")  # Debian's Lugaru: in no training corpus
    assert rate == SR
    samples = 0.001 * np.random.default_rng(0).standard_normal(3 * SR)  # -60 dBFS noise
    samples[SR : SR + bark.size] += bark
    scores = fused_scores(scorers, head, samples)
    assert head.on_threshold is not None
    assert scores[50:80].max() >= head.on_threshold  # steps of the bark (1.0-1.6 s)


def test_speech_a_tone_and_silence_stay_under_the_off_threshold(
    scorers: Scorers, head: DogHead
) -> None:
    speech, _ = sf.read(DATA / "allison_vm_login_speech.flac")
    t = np.arange(3 * SR) / SR
    assert head.off_threshold is not None
    for what, samples in (("speech", speech), ("tone", 0.3 * np.sin(2 * np.pi * 1000 * t)),
                          ("silence", np.zeros(3 * SR))):  # fmt: skip
        assert fused_scores(scorers, head, samples).max() < head.off_threshold, what


def test_the_same_input_gives_the_same_scores_every_run(scorers: Scorers, head: DogHead) -> None:
    samples = np.random.default_rng(4).standard_normal(2 * SR) * 0.05
    np.testing.assert_array_equal(
        fused_scores(scorers, head, samples), fused_scores(scorers, head, samples)
    )


def test_barkwatch_analyze_finds_the_events_the_head_evaluation_scores(
    tmp_path: Path, scorers: Scorers, head: DogHead
) -> None:
    # The evaluation (training.head_data / head_eval) scores audio as the sensor and the
    # analyzer do; the offline analysis goes through wire v2 and the pipeline: same events.
    bark, _ = sf.read(DATA / "lugaru_bark2.flac")
    samples = 0.003 * np.random.default_rng(1).standard_normal(12 * SR)
    for at_s in (2.0, 6.0, 9.0):
        samples[int(at_s * SR) : int(at_s * SR) + bark.size] += bark
    path = tmp_path / "barks.wav"
    sf.write(path, samples, SR, subtype="FLOAT")
    # the head under test (v4, the sensor's) rather than the analyzer's bundled v5-fused, at
    # its own thresholds (no event verifier)
    document = analyze_file(path, full_scale_db=100.0,
                            settings=DetectorSettings(head_path=str(DEFAULT_HEAD_PATH),
                                                      verifier_path="none"))
    assert head.on_threshold is not None and head.off_threshold is not None
    expected = spans_of(fused_scores(scorers, head, samples), head.on_threshold,
                        head.off_threshold)  # fmt: skip
    assert len(expected) == 3
    assert [(e["onset_s"], e["offset_s"]) for e in document["events"]] == [
        (round(a, 2), round(b, 2)) for a, b in expected
    ]
    assert document["model_version"].endswith(head.version)
