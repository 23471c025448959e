"""Bout context (issue 39, item 2): weaker candidates near an event, or among enough other
candidates, are events; a lone weak sound is not. Known answers on synthetic scores, then on
the demo recording's real barks through the sensor's networks and the bundled head."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from analyzer.detect import DetectorSettings, DevicePipeline
from analyzer.detect.events import BoutTracker, DogEvent, EventTracker, event_tracker
from analyzer.offline.analysis import frames_of_file
from sensor.wire import Frame
from tests.conftest import write_excerpt

HOP_S = 0.02
STEPS_PER_S = 50
BOUT = DetectorSettings(on_threshold=0.9, off_threshold=0.7, bout_context_s=10.0,
                        bout_on_threshold=0.6, bout_off_threshold=0.4, bout_min_events=3,
                        merge_gap_s=0.0, min_duration_s=0.0)  # fmt: skip


def _scores(peaks: list[tuple[float, float]], duration_s: float) -> np.ndarray:
    """Zero scores with a 0.2 s sound scoring ``peak`` at each ``(time s, peak)``."""
    scores = np.zeros(round(duration_s * STEPS_PER_S))
    for at_s, peak in peaks:
        first = round(at_s * STEPS_PER_S)
        scores[first:first + 10] = peak
    return scores


def _onsets_s(tracker: EventTracker | BoutTracker, scores: np.ndarray,
              chunk: int | None = None) -> list[float]:  # fmt: skip
    levels = np.full(scores.size, 60.0)
    chunk = chunk or scores.size
    events: list[DogEvent] = []
    for first in range(0, scores.size, chunk):
        part = slice(first, first + chunk)
        events += tracker.feed(round(first * HOP_S * 1e9), HOP_S, scores[part], levels[part],
                               levels[part])  # fmt: skip
    events += tracker.flush()
    return [e.onset_ns / 1e9 for e in events]


def test_without_context_the_settings_give_the_plain_tracker() -> None:
    assert type(event_tracker("d", DetectorSettings(), "v")) is EventTracker
    assert type(event_tracker("d", BOUT, "v")) is BoutTracker


def test_a_weak_candidate_within_the_context_of_an_event_is_an_event() -> None:
    scores = _scores([(1.0, 0.95), (8.0, 0.65), (30.0, 0.65)], 40.0)
    assert _onsets_s(BoutTracker("d", BOUT, "v"), scores) == [1.0, 8.0]
    assert _onsets_s(EventTracker("d", BOUT, "v"), scores) == [1.0]


def test_a_weak_candidate_before_an_event_is_an_event_too() -> None:
    scores = _scores([(1.0, 0.65), (5.0, 0.95)], 10.0)
    assert _onsets_s(BoutTracker("d", BOUT, "v"), scores) == [1.0, 5.0]


def test_enough_weak_candidates_in_a_row_confirm_one_another() -> None:
    three = _scores([(1.0, 0.65), (9.0, 0.65), (17.0, 0.65)], 30.0)
    assert _onsets_s(BoutTracker("d", BOUT, "v"), three) == [1.0, 9.0, 17.0]
    apart = _scores([(1.0, 0.65), (9.0, 0.65), (30.0, 0.65)], 40.0)  # the third too late
    assert _onsets_s(BoutTracker("d", BOUT, "v"), apart) == []


def test_a_lone_weak_candidate_and_a_score_under_the_candidate_threshold_stay_unfound() -> None:
    assert _onsets_s(BoutTracker("d", BOUT, "v"), _scores([(1.0, 0.65)], 5.0)) == []
    near = _scores([(1.0, 0.95), (3.0, 0.55)], 8.0)
    assert _onsets_s(BoutTracker("d", BOUT, "v"), near) == [1.0]


def test_the_events_do_not_depend_on_how_the_steps_arrive() -> None:
    rng = np.random.default_rng(3)
    scores = np.clip(np.convolve(rng.random(6000), np.ones(15) / 15, "same") * 1.6 - 0.3, 0, 1)
    whole = _onsets_s(BoutTracker("d", BOUT, "v"), scores)
    assert whole and whole == _onsets_s(BoutTracker("d", BOUT, "v"), scores, chunk=50)
    assert whole == _onsets_s(BoutTracker("d", BOUT, "v"), scores, chunk=7)


# The bout tracker against the fusion at its own thresholds: without the event verifier (the
# default since 2026-12-07, which finds the weaker bark below by itself: test_verifier.py).
PLAIN = DetectorSettings(verifier_path="none")
DEMO_BOUT = dataclasses.replace(PLAIN, bout_context_s=10.0, bout_on_threshold=0.5,
                                bout_off_threshold=0.3, bout_min_events=3)  # fmt: skip


@pytest.fixture(scope="module")
def two_barks(tmp_path_factory: pytest.TempPathFactory) -> list[Frame]:
    """Demo recording 0-14 s: a clear bark at 2.39-4.36 s (the bundled head's fused score
    0.99), a weaker one at 10.83-12.07 s (0.53, under the bundled on threshold 0.95)."""
    path = write_excerpt(tmp_path_factory.mktemp("bout") / "two.wav", 0.0, 14.0)
    return frames_of_file(path, 100.0)[1]


@pytest.fixture(scope="module")
def weak_bark_alone(tmp_path_factory: pytest.TempPathFactory) -> list[Frame]:
    """Demo recording 9-14 s: the weaker bark alone."""
    path = write_excerpt(tmp_path_factory.mktemp("bout") / "alone.wav", 9.0, 5.0)
    return frames_of_file(path, 100.0)[1]


def _spans_s(frames: list[Frame], settings: DetectorSettings) -> list[tuple[float, float]]:
    pipeline = DevicePipeline("dev-1", settings)
    events = [e for f in frames for e in pipeline.feed(f).events] + pipeline.flush()
    return [(e.onset_ns / 1e9, e.offset_ns / 1e9) for e in events]


def test_with_context_the_weaker_second_bark_of_a_bout_is_found_and_without_not(
    two_barks: list[Frame],
) -> None:
    plain = _spans_s(two_barks, PLAIN)
    bout = _spans_s(two_barks, DEMO_BOUT)
    assert [a for a, b in plain if b > 10.83 and a < 12.07] == []
    assert len(bout) == 2 and bout[1][0] < 12.07 and bout[1][1] > 10.83
    assert bout[0][0] <= plain[0][0] < plain[0][1] <= bout[0][1]  # the clear bark, no less


def test_the_weaker_bark_alone_stays_unfound_with_context(weak_bark_alone: list[Frame]) -> None:
    assert _spans_s(weak_bark_alone, DEMO_BOUT) == []
    # it is a candidate: were every candidate an event, it would be one
    assert len(_spans_s(weak_bark_alone, dataclasses.replace(DEMO_BOUT, bout_min_events=1))) == 1


def test_with_context_the_same_frames_give_the_same_events_on_every_run(
    two_barks: list[Frame],
) -> None:
    assert _spans_s(two_barks, DEMO_BOUT) == _spans_s(two_barks, DEMO_BOUT)
