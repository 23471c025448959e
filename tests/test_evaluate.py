"""``barkwatch evaluate``: metric definitions with known answers, and the command on fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile

from analyzer.cli.main import main
from analyzer.detect import DogHead
from analyzer.detect.detector import model_version
from analyzer.offline.evaluate import (
    FileResult,
    average_precision,
    event_counts,
    false_alarms,
    matched_references,
    read_annotations,
    recall_at_far,
    segment_counts,
    summarise,
    union_length_s,
)
from tests.conftest import write_excerpt


def test_segment_counts_mark_every_overlapped_second() -> None:
    # Reference 1.5-2.5 s covers segments 1 and 2; estimate 2.2-3.1 s covers 2 and 3.
    counts = segment_counts([(1.5, 2.5)], [(2.2, 3.1)], duration_s=5.0)
    assert (counts.tp, counts.fp, counts.fn) == (1, 1, 1)


def test_event_onsets_match_within_the_collar_once_each() -> None:
    reference = [(1.0, 2.0), (5.0, 6.0), (9.0, 9.5)]
    estimated = [(1.2, 2.5), (1.25, 1.9), (5.4, 6.0)]  # second one late duplicate, third late
    counts = event_counts(reference, estimated, collar_s=0.25)
    assert (counts.tp, counts.fp, counts.fn) == (1, 2, 2)
    assert counts.summary()["precision"] == round(1 / 3, 4)
    assert counts.summary()["recall"] == round(1 / 3, 4)


def test_the_nearest_onset_takes_a_reference_event_when_two_could() -> None:
    # Both estimates lie within 0.25 s of reference 0 and of reference 1 (onsets 1.0 and 1.3);
    # the nearest pair (1.3, 1.32) is matched first, then 1.0 with 1.1.
    reference = [(1.0, 1.2), (1.3, 1.5), (4.0, 4.4)]
    estimated = [(1.1, 1.2), (1.32, 1.6)]
    assert matched_references(reference, estimated, collar_s=0.25) == {0, 1}
    assert matched_references(reference, [(1.32, 1.6)], collar_s=0.25) == {1}
    assert matched_references(reference, [], collar_s=0.25) == set()


def test_false_alarms_are_estimates_overlapping_no_reference() -> None:
    assert false_alarms([(1.0, 2.0)], [(1.5, 3.0), (4.0, 4.5), (7.0, 8.0)]) == 2
    assert union_length_s([(1.0, 2.0), (1.5, 3.0), (9.0, 12.0)], duration_s=10.0) == 3.0


def test_average_precision_of_a_perfect_and_an_inverted_ranking() -> None:
    labels = np.array([True, True, False, False])
    assert average_precision(labels, np.array([0.9, 0.8, 0.2, 0.1])) == 1.0
    # Inverted: positives ranked last; precision at recall 0.5 is 1/3, at 1.0 is 2/4.
    assert abs(average_precision(labels, np.array([0.1, 0.2, 0.8, 0.9])) - (0.5 / 3 + 0.25)) < 1e-9


def test_summary_counts_false_alarms_per_hour_of_non_dog_audio() -> None:
    dog = FileResult("a", 10.0, [(2.0, 4.0)], [(2.1, 3.9), (7.0, 7.5)], np.zeros(10))
    quiet = FileResult("b", 3600.0, [], [(10.0, 11.0)], np.zeros(3600))
    summary, _ = summarise([dog, quiet], segment_s=1.0, collar_s=0.25)
    assert summary["false_alarms"] == 2
    assert summary["non_dog_hours"] == round((8.0 + 3600.0) / 3600, 5)
    assert summary["unannotated_false_alarms_per_hour"] == 1.0
    assert summary["event_based"]["tp"] == 1 and summary["event_based"]["fp"] == 2


def test_clip_metrics_score_each_file_by_its_highest_step() -> None:
    def clip(name: str, dog: bool, top: float) -> FileResult:
        return FileResult(name, 5.0, [(1.0, 2.0)] if dog else [], [], np.array([0.01, top]))

    others = [clip(f"o{i}", False, 0.01 * i) for i in range(50)]  # 0.00 .. 0.49
    results = [clip("d1", True, 0.9), clip("d2", True, 0.305), *others]
    summary, _ = summarise(results, segment_s=1.0, collar_s=0.25)
    clips = summary["clip_based"]
    assert (clips["clips"], clips["dog_clips"]) == (52, 2)
    # d1 ranks first; d2 (0.305) ranks behind the 19 other clips at 0.31 .. 0.49.
    assert clips["average_precision"] == round((1.0 + 2 / 21) / 2, 4)
    # 2 % of 50 other clips: the threshold sits at their 98th percentile (0.4802).
    assert clips["threshold_at_2pct_false_alarm_rate"] == 0.4802
    assert clips["recall_at_2pct_false_alarm_rate"] == 0.5
    assert [f["max_dog_score"] for f in summary["per_file"][:2]] == [0.9, 0.305]


def test_recall_at_a_false_alarm_rate_matches_counting_by_hand() -> None:
    rng = np.random.default_rng(4)
    labels = rng.random(400) < 0.3
    scores = rng.random(400) + 0.3 * labels
    recall, threshold = recall_at_far(labels, scores, 0.05)
    assert np.mean(scores[~labels] > threshold) <= 0.05 + 1 / np.sum(~labels)
    assert recall == np.sum(scores[labels] > threshold) / np.sum(labels)


def test_annotation_rows_labelled_not_dog_are_not_references(tmp_path: Path) -> None:
    csv_path = tmp_path / "x.csv"
    csv_path.write_text("onset_s,offset_s,label\n3.0,4.0,dog\n1.0,2.0,not_dog\n")
    assert read_annotations(csv_path) == [(3.0, 4.0)]


def test_evaluate_command_on_a_tiny_fixture_set(tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    data.mkdir()
    # 20 s of the demo recording (70-90 s) with its two annotated bark spans, shifted.
    write_excerpt(data / "barks.wav", 70.0, 20.0)
    (data / "barks.annotations.csv").write_text(
        "onset_s,offset_s,label\n4.365,5.575,dog\n12.746,16.616,dog\n"
    )
    # Ten seconds of a quiet room (low noise, seeded) without annotations: no dog.
    noise = np.random.default_rng(3).standard_normal(160000) * 1e-3
    soundfile.write(data / "quiet.wav", noise, 16000, subtype="FLOAT")
    out = tmp_path / "out"
    # The bundled CNN's known answers: a dog head that passes its score through (wire v2's
    # default fuses it with YAMNet's 0.96 s patches, which moves onsets up to a patch earlier)
    head = tmp_path / "cnn_only.npz"
    np.savez(head, **DogHead(version="cnn-only", fusion=np.array([1.0, 0.0, 0.0])).to_arrays())
    config = tmp_path / "analyzer.toml"
    config.write_text(f'[detector]\nhead_path = "{head}"\n')
    assert main(["evaluate", str(data), "--out", str(out), "--full-scale-db", "100",
                 "--config", str(config)]) == 0
    printed = json.loads(capsys.readouterr().out)
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "pr_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert printed["files"] == summary["files"] == 2
    assert summary["duration_s"] == 30.0
    assert summary["model_version"] == model_version()
    # Known from the annotations alone: 2 + 5 dog segments, 2 reference events, and the
    # non-dog time is 30 s minus the two spans.
    assert summary["segment_based"]["tp"] + summary["segment_based"]["fn"] == 7
    assert summary["event_based"]["tp"] + summary["event_based"]["fn"] == 2
    assert summary["non_dog_hours"] == round((30.0 - 1.21 - 3.87) / 3600, 5)
    assert summary["unannotated_hours"] == round(10.0 / 3600, 5)
    # Known answers of the bundled model: both bark spans found at their onsets, nothing
    # in the quiet room, at most the two pauses inside the long span missed.
    assert summary["event_based"]["recall"] == 1.0
    assert summary["unannotated_false_alarms"] == 0
    assert summary["segment_based"]["fn"] <= 2
    assert summary["segment_average_precision"] >= 0.8
