"""The dog head's interface: patch scores, their spread over 20-ms steps, fusion, the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analyzer.detect import DogHead, step_head_scores
from analyzer.detect.classifier import ClassifierError
from analyzer.detect.yamnet import DOG_CLASSES, load_class_names


def _class_scores(k: int, dog_class: str, value: float) -> np.ndarray:
    scores = np.full((k, 521), 0.01, np.float32)
    scores[:, load_class_names().index(dog_class)] = value
    return scores


def test_untrained_head_scores_a_patch_by_its_most_likely_dog_class() -> None:
    head = DogHead()
    scores = _class_scores(2, "Bark", 0.8)
    scores[1, load_class_names().index("Howl")] = 0.9
    got = head.patch_scores(np.zeros((2, 1024), np.float32), scores)
    np.testing.assert_allclose(got, [0.8, 0.9])


def test_untrained_head_ignores_classes_that_are_not_dogs() -> None:
    scores = _class_scores(1, "Speech", 0.99)
    got = DogHead().patch_scores(np.zeros((1, 1024), np.float32), scores)
    np.testing.assert_allclose(got, [0.01])
    assert "Speech" not in DOG_CLASSES


def test_untrained_fusion_is_the_higher_of_the_two_scores() -> None:
    fused = DogHead().fuse(np.array([0.1, 0.9, 0.5]), np.array([0.7, 0.2, np.nan]))
    np.testing.assert_allclose(fused, [0.7, 0.9, 0.5])


def test_min_fusion_needs_both_scores() -> None:
    head = DogHead(fusion_kind="min")
    fused = head.fuse(np.array([0.1, 0.9, 0.97]), np.array([0.8, 0.2, 0.99]))
    np.testing.assert_allclose(fused, [0.1, 0.2, 0.97])


def test_step_takes_the_highest_patch_whose_window_holds_its_centre() -> None:
    # patches at 0 and 0.48 s, 0.96 s long; 20-ms steps: centres 0.01, 0.03, ...
    steps = step_head_scores(np.array([0.0, 0.48]), np.array([0.2, 0.6]), n_steps=80)
    assert steps[0] == pytest.approx(0.2)  # centre 0.01: first patch only
    assert steps[23] == pytest.approx(0.2)  # centre 0.47: first patch only
    assert steps[24] == pytest.approx(0.6)  # centre 0.49: both, the higher
    assert steps[71] == pytest.approx(0.6)  # centre 1.43: second patch only
    assert steps[72] == 0.0  # centre 1.45: past both windows


def test_step_scores_match_a_loop_over_step_centres() -> None:
    rng = np.random.default_rng(3)
    starts = np.arange(20) * 0.48 + 0.013
    scores = rng.random(20)
    got = step_head_scores(starts, scores, n_steps=520)
    centres = (np.arange(520) + 0.5) * 0.02
    want = [
        max([s for t, s in zip(starts, scores, strict=True) if t <= c < t + 0.96], default=0.0)
        for c in centres
    ]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_head_file_round_trip_gives_the_same_scores(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n_features = 1024 + 521
    head = DogHead(
        version="test-head",
        layers=(
            (rng.normal(size=(n_features, 4)).astype(np.float32) * 0.05, np.zeros(4, np.float32)),
            (rng.normal(size=(4, 1)).astype(np.float32), np.zeros(1, np.float32)),
        ),
        feature_mean=np.zeros(n_features, np.float32),
        feature_scale=np.ones(n_features, np.float32),
        fusion=np.array([1.0, 1.0, -1.0]),
        fusion_kind="logistic",
    )
    path = tmp_path / "head.npz"
    head.save(path)
    loaded = DogHead.load(path)
    emb = rng.random((3, 1024)).astype(np.float32)
    ys = rng.random((3, 521)).astype(np.float32)
    assert loaded.version == "test-head"
    np.testing.assert_array_equal(loaded.patch_scores(emb, ys), head.patch_scores(emb, ys))
    np.testing.assert_array_equal(
        loaded.fuse(np.array([0.3]), np.array([0.6])), head.fuse(np.array([0.3]), np.array([0.6]))
    )


def test_patch_scores_name_the_wrong_shape() -> None:
    with pytest.raises(ClassifierError, match="embeddings: expected"):
        DogHead().patch_scores(np.zeros((2, 512), np.float32), np.zeros((2, 521), np.float32))


def test_a_file_that_is_not_a_head_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.npz"
    path.write_bytes(b"not a zip")
    with pytest.raises(ClassifierError, match="not a dog head file"):
        DogHead.load(path)


def _constant_head(logit_value: float, yamnet_veto: float | None) -> DogHead:
    """A trained head whose score is sigmoid(logit_value) on every patch."""
    n_features = 1024 + 521
    return DogHead(
        version="constant",
        layers=((np.zeros((n_features, 1), np.float32), np.array([logit_value], np.float32)),),
        feature_mean=np.zeros(n_features, np.float32),
        feature_scale=np.ones(n_features, np.float32),
        yamnet_veto=yamnet_veto,
    )


def test_yamnet_veto_caps_a_head_where_yamnet_hears_no_dog() -> None:
    # The head says 0.999 everywhere. Patch 0: YAMNet's best dog class 0.01, so the cap is
    # sigmoid(logit(0.01) + 4.5) = 0.476; patch 1: Bark 0.99, cap 0.99989, above the head.
    scores = _class_scores(2, "Bark", 0.01)
    scores[1, load_class_names().index("Bark")] = 0.99
    emb = np.zeros((2, 1024), np.float32)
    capped = _constant_head(6.9, yamnet_veto=4.5).patch_scores(emb, scores)
    plain = _constant_head(6.9, yamnet_veto=None).patch_scores(emb, scores)
    expected_cap = 1 / (1 + np.exp(-(np.log(0.01 / 0.99) + 4.5)))
    np.testing.assert_allclose(capped, [expected_cap, plain[1]], rtol=1e-5)
    np.testing.assert_allclose(plain, [0.999, 0.999], atol=1e-4)


def test_yamnet_veto_survives_the_file_and_is_refused_on_an_untrained_head(
    tmp_path: Path,
) -> None:
    path = tmp_path / "veto.npz"
    _constant_head(2.0, yamnet_veto=3.0).save(path)
    assert DogHead.load(path).yamnet_veto == 3.0
    arrays = DogHead().to_arrays() | {"yamnet_veto": np.array(3.0)}
    with pytest.raises(ClassifierError, match="yamnet_veto"):
        DogHead.from_arrays(arrays)


def test_a_sensor_scored_head_takes_the_fine_tuned_scores_the_frame_carries() -> None:
    head = DogHead(version="tuned", fusion_kind="head", sensor_scores=True)
    ys = _class_scores(2, "Bark", 0.9)
    got = head.patch_scores(np.zeros((2, 1024), np.float32), ys, np.array([0.2, 0.7]))
    np.testing.assert_allclose(got, [0.2, 0.7], atol=1e-7)
    # a frame from a sensor that runs YAMNet alone: untouched YAMNet's dog classes
    np.testing.assert_allclose(head.patch_scores(np.zeros((2, 1024), np.float32), ys), [0.9] * 2)
    with pytest.raises(ClassifierError, match="sensor dog scores: expected 2 finite values"):
        head.patch_scores(np.zeros((2, 1024), np.float32), ys, np.array([0.2]))


def test_head_fusion_ignores_the_cnn() -> None:
    head = DogHead(fusion_kind="head", sensor_scores=True)
    np.testing.assert_allclose(head.fuse(np.array([0.99, 0.0]), np.array([0.1, 0.8])), [0.1, 0.8])


def test_a_sensor_scored_head_survives_its_file_and_refuses_layers(tmp_path: Path) -> None:
    head = DogHead(version="dog-head-2.0", fusion_kind="head", sensor_scores=True,
                   on_threshold=0.5, off_threshold=0.3)
    head.save(tmp_path / "head.npz")
    back = DogHead.load(tmp_path / "head.npz")
    assert (back.sensor_scores, back.kind, back.on_threshold) == (True, "head", 0.5)
    arrays = head.to_arrays() | {"n_layers": np.array(1), "w0": np.zeros((1545, 1), np.float32),
                                 "b0": np.zeros(1, np.float32),
                                 "feature_mean": np.zeros(1545, np.float32),
                                 "feature_scale": np.ones(1545, np.float32)}
    with pytest.raises(ClassifierError, match="from the sensor has no layers of its own"):
        DogHead.from_arrays(arrays)
    with pytest.raises(ClassifierError, match="patch_scores_from must be 'head' or 'sensor'"):
        DogHead.from_arrays(head.to_arrays() | {"patch_scores_from": np.array("cloud")})
