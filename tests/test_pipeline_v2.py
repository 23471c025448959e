"""The analyzer's pipeline: per-step fused scores aligned with the head's reference definition
across frames (on the sensor's patch scores from the wire, and on embeddings in memory), and
the same events on every run."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from analyzer.deploy.services import Services
from analyzer.detect import DetectorSettings, DevicePipeline, DogHead, step_head_scores
from analyzer.detect.classifier import CentredMean
from analyzer.offline.analysis import analyze_file, frames_of_file
from sensor.frames import frames_from_samples
from sensor.wire import GATE_DOG, Frame, decode_frame, encode_frame, frame_topic
from tests.conftest import write_excerpt

SETTINGS = DetectorSettings()  # smoothing 0.1 s: 5 steps


def _varying_head() -> DogHead:
    """A head whose patch scores differ from patch to patch, fused by a logistic that weighs
    both scores, so a patch put on the wrong steps shows in the fused scores."""
    rng = np.random.default_rng(11)
    return DogHead.from_arrays({
        "version": np.array("test-head"), "n_layers": np.array(1),
        "w0": rng.normal(0.0, 0.05, (1024, 1)).astype(np.float32),
        "b0": np.zeros(1, np.float32), "use_class_scores": np.array(False),
        "feature_mean": np.zeros(1024, np.float32), "feature_scale": np.ones(1024, np.float32),
        "fusion": np.array([1.0, 2.0, -0.5]),
    })


@pytest.fixture(scope="module")
def barks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo recording 0-14 s: bark spans at 2.39-4.36 s and 10.83-12.07 s."""
    return write_excerpt(tmp_path_factory.mktemp("barks") / "barks.wav", 0.0, 14.0)


@pytest.fixture(scope="module")
def frames(barks: Path) -> list[Frame]:
    # 14 frames as the wire delivers them; patches straddle frames and come with the next one
    return frames_of_file(barks, 100.0)[1]


@pytest.fixture(scope="module")
def memory_frames(barks: Path) -> list[Frame]:
    """The same frames in memory, on the sensor: with YAMNet's embeddings and class scores."""
    samples, rate = sf.read(barks, dtype="float64")
    return list(frames_from_samples(samples, rate, 100.0))


def _streamed(frames: list[Frame], head: DogHead) -> tuple[np.ndarray, int]:
    pipeline = DevicePipeline("dev-1", SETTINGS, head=head)
    results = [pipeline.feed(frame) for frame in frames] + [pipeline.finish()]
    starts = [r.scores_start_ns for r in results if r.step_scores.size]
    scores = np.concatenate([r.step_scores for r in results])
    return scores, starts[0]


def test_streamed_fused_scores_equal_the_reference_on_the_whole_stream(
    memory_frames: list[Frame],
) -> None:
    frames = memory_frames  # another head than the sensor's scores the embeddings in memory
    head = _varying_head()
    streamed, first_ns = _streamed(frames, head)
    origin_ns = frames[0].capture_ns
    assert first_ns == origin_ns
    smoother = CentredMean(5)
    cnn = np.concatenate([smoother.process(np.concatenate([f.dog_steps for f in frames])),
                          smoother.flush()])
    starts_s = np.concatenate([(f.patch_starts_ns - origin_ns) / 1e9 for f in frames])
    patch_scores = head.patch_scores(np.concatenate([f.embeddings for f in frames]),
                                     np.concatenate([f.class_scores for f in frames]))
    assert len(np.unique(np.round(patch_scores, 3))) > 3  # the test can see misalignment
    reference = head.fuse(cnn, step_head_scores(starts_s, patch_scores, cnn.size))
    assert streamed.size == 50 * len(frames)
    np.testing.assert_allclose(streamed, reference, atol=1e-6)


def test_a_patch_shifted_by_one_hop_changes_the_fused_scores(
    memory_frames: list[Frame],
) -> None:
    """The comparison above would notice misaligned patches."""
    import dataclasses

    frames = memory_frames
    head = _varying_head()
    shifted = [dataclasses.replace(f, patch_start_ns=f.patch_start_ns + 480_000_000)
               if i == 1 else f for i, f in enumerate(frames)]
    assert not np.allclose(_streamed(shifted, head)[0], _streamed(frames, head)[0])


def test_from_the_wire_the_pipeline_fuses_the_sensors_patch_scores(
    memory_frames: list[Frame],
) -> None:
    """Wire v4: the embeddings stay on the sensor; the bundled head's fused scores from the
    patch scores the sensor sent equal those from the embeddings in memory (to float16)."""
    import dataclasses

    head = DogHead.load()
    whole = [decode_frame(encode_frame(dataclasses.replace(f, gate=GATE_DOG)))
             for f in memory_frames]
    assert all(len(f.embeddings) == 0 for f in whole)
    assert sum(len(f.patch_head_scores) for f in whole) == sum(
        len(f.embeddings) for f in memory_frames) > 20
    wire, _ = _streamed(whole, head)
    memory, _ = _streamed(memory_frames, head)
    assert wire.max() > 0.9  # the clip's barks
    np.testing.assert_allclose(wire, memory, atol=2e-3)


def test_the_default_head_fuses_by_maximum_with_the_untouched_yamnet_score(
    frames: list[Frame],
) -> None:
    head = DogHead()
    streamed, _ = _streamed(frames, head)
    smoother = CentredMean(5)
    cnn = np.concatenate([smoother.process(np.concatenate([f.dog_steps for f in frames])),
                          smoother.flush()])
    assert np.all(streamed >= cnn - 1e-6)


def test_a_head_with_its_own_thresholds_sets_the_trackers() -> None:
    head = DogHead(on_threshold=0.6, off_threshold=0.4)
    pipeline = DevicePipeline("dev-1", SETTINGS, head=head)
    assert (pipeline.settings.on_threshold, pipeline.settings.off_threshold) == (0.6, 0.4)


def test_the_bark_clip_gives_the_same_events_on_every_run_and_through_the_wire(
    barks: Path, frames: list[Frame],
) -> None:
    first = analyze_file(barks, full_scale_db=100.0)["events"]
    assert first and first == analyze_file(barks, full_scale_db=100.0)["events"]
    pipeline = DevicePipeline("offline", SETTINGS)
    rewired = [decode_frame(encode_frame(f)) for f in frames]
    events = [e for f in rewired for e in pipeline.feed(f).events] + pipeline.flush()
    assert [round(e.onset_ns / 1e9, 3) for e in events] == [e["onset_s"] for e in first]


def test_a_gap_between_frames_closes_the_open_event_and_restarts_the_scores(
    frames: list[Frame],
) -> None:
    pipeline = DevicePipeline("dev-1", SETTINGS)
    pipeline.feed(frames[0])
    after_gap = pipeline.feed(frames[2])  # frame 1 missing
    assert after_gap.scores_start_ns == frames[2].capture_ns


def test_a_live_analyzer_refuses_v1_to_v3_frames_counting_them_by_reason_and_keeps_v4(
    services: Services, frames: list[Frame],
) -> None:
    import dataclasses

    import msgpack

    from tests.conftest import publish_through_analyzer
    from tests.test_end_to_end import analyzer_config

    start_ns = time.time_ns() - 60 * 10**9
    v4 = [dataclasses.replace(f.retimed(start_ns + i * 10**9), device_id="dev-v", seq=i,
                              gate=GATE_DOG) for i, f in enumerate(frames[:3])]
    old = msgpack.unpackb(encode_frame(v4[0]), raw=False)
    v3 = msgpack.packb(old | {"v": 3, "seq": 9}, use_bin_type=True)
    v2 = msgpack.packb({k: v for k, v in old.items() if k != "g"} | {"v": 2, "seq": 8},
                       use_bin_type=True)
    for key in ("dog_s", "p0", "pd", "mv", "g"):
        del old[key]
    v1 = msgpack.packb(old | {"v": 1, "seq": 7, "mels": 64,
                              "mel": np.zeros((50, 64), np.float16).tobytes()},
                       use_bin_type=True)
    payloads = [encode_frame(v4[0]), v1, encode_frame(v4[1]), v2, v3, encode_frame(v4[2])]
    analyzer = publish_through_analyzer(analyzer_config(services), frame_topic("dev-v"),
                                        payloads, stored=3)
    assert analyzer.rejections == {"version": 3}


def test_offline_measurement_runs_the_sensor_network_it_is_given(
    barks: Path, frames: list[Frame]
) -> None:
    """judge_soundscapes.py --sensor-network: untouched YAMNet in the fine-tuned network's
    place sends no fine-tuned score, and its file digest names it in ``mv``."""
    from sensor.yamnet_network import DEFAULT_YAMNET_PATH

    untouched = frames_of_file(barks, 100.0, yamnet_model_path=str(DEFAULT_YAMNET_PATH))[1]
    assert any(f.patch_dog_scores is not None and f.patch_dog_scores.size for f in frames)
    assert all(f.patch_dog_scores is None for f in untouched)
    assert untouched[0].model_versions != frames[0].model_versions
    assert [f.capture_ns for f in untouched] == [f.capture_ns for f in frames]
