"""Event tracking: hysteresis, merge gap, minimum duration; and sequence reordering."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.detect.events import EventTracker
from analyzer.detect.settings import DetectorSettings
from analyzer.ingest.ordering import ReorderBuffer
from sensor.frames import frames_from_samples
from tests.conftest import sine

HOP_S = 0.02
HOP_NS = 20_000_000


def _events(scores: list[float], **settings: float) -> list:
    settings = {"on_threshold": 0.6, "off_threshold": 0.4, **settings}
    tracker = EventTracker("dev-1", DetectorSettings(**settings), "test")
    levels = np.full(len(scores), 60.0)
    return tracker.feed(0, HOP_S, np.array(scores), levels, levels) + tracker.flush()


def test_hysteresis_opens_above_on_and_closes_below_off() -> None:
    events = _events([0.1, 0.7, 0.5, 0.5, 0.3, 0.1], merge_gap_s=0.0, min_duration_s=0.0)
    assert [(e.onset_ns, e.offset_ns) for e in events] == [(1 * HOP_NS, 4 * HOP_NS)]
    assert events[0].confidence == 0.7


def test_an_event_starts_where_its_score_rose_above_the_off_threshold() -> None:
    events = _events([0.1, 0.5, 0.5, 0.7, 0.5, 0.1, 0.5, 0.1], merge_gap_s=0.0,
                     min_duration_s=0.0)  # fmt: skip
    # Steps 1-2 rose above off (0.4) before step 3 reached on (0.6); step 6 never reaches on.
    assert [(e.onset_ns, e.offset_ns) for e in events] == [(1 * HOP_NS, 5 * HOP_NS)]


def _reference_spans(scores: np.ndarray, on: float, off: float, gap_steps: float,
                     min_steps: float) -> list[tuple[int, int]]:  # fmt: skip
    """Brute force over the whole array: runs of steps >= off holding a step >= on, joined
    when the next starts less than ``gap_steps`` after the last ended, then the short dropped."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < scores.size:
        if scores[i] < off:
            i += 1
            continue
        j = i
        while j < scores.size and scores[j] >= off:
            j += 1
        if scores[i:j].max() >= on:
            if spans and i - spans[-1][1] < gap_steps:
                spans[-1] = (spans[-1][0], j)
            else:
                spans.append((i, j))
        i = j
    return [(a, b) for a, b in spans if b - a >= min_steps]


@settings(max_examples=200, deadline=None)
@given(
    levels=st.lists(st.integers(0, 4), min_size=1, max_size=120),
    cuts=st.lists(st.integers(1, 119), max_size=6),
    gap_steps=st.integers(0, 6),
    min_steps=st.integers(0, 4),
)
def test_events_equal_a_brute_force_reference_however_the_steps_arrive(
    levels: list[int], cuts: list[int], gap_steps: int, min_steps: int
) -> None:
    scores = np.array(levels, dtype=np.float64) / 4.0  # 0, 0.25, 0.5, 0.75, 1
    config = DetectorSettings(on_threshold=0.75, off_threshold=0.5, merge_gap_s=gap_steps * HOP_S,
                              min_duration_s=min_steps * HOP_S)  # fmt: skip
    tracker = EventTracker("dev-1", config, "test")
    levels_db = np.full(scores.size, 60.0)
    events = []
    bounds = [0, *sorted(c for c in set(cuts) if c < scores.size), scores.size]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        events += tracker.feed(a * HOP_NS, HOP_S, scores[a:b], levels_db[a:b], levels_db[a:b])
        events += tracker.feed(b * HOP_NS, HOP_S, scores[b:b], levels_db[b:b], levels_db[b:b])
    events += tracker.flush()
    got = [(e.onset_ns // HOP_NS, e.offset_ns // HOP_NS) for e in events]
    # min_duration 0.02 * k vs k steps: compare in steps with a little slack for rounding
    assert got == _reference_spans(scores, 0.75, 0.5, gap_steps, min_steps - 1e-6)


def test_events_closer_than_the_merge_gap_become_one() -> None:
    scores = [0.9, 0.9, 0.1, 0.1, 0.9, 0.1] + [0.1] * 30
    merged = _events(scores, merge_gap_s=0.1, min_duration_s=0.0)
    apart = _events(scores, merge_gap_s=0.03, min_duration_s=0.0)
    assert [(e.onset_ns, e.offset_ns) for e in merged] == [(0, 5 * HOP_NS)]
    assert len(apart) == 2


def test_events_shorter_than_the_minimum_are_dropped() -> None:
    assert _events([0.1, 0.9, 0.1, 0.1], merge_gap_s=0.0, min_duration_s=0.05) == []


def test_event_level_is_the_energy_mean_and_maximum() -> None:
    tracker = EventTracker("dev-1", DetectorSettings(on_threshold=0.6, off_threshold=0.4,
                                                     merge_gap_s=0.0, min_duration_s=0.0), "t")
    laeq = np.array([50.0, 60.0, 60.0, 50.0])
    laf = np.array([51.0, 63.0, 62.0, 52.0])
    events = tracker.feed(0, HOP_S, np.array([0.1, 0.9, 0.9, 0.1]), laeq, laf) + tracker.flush()
    assert events[0].laeq_db == 60.0
    assert events[0].lafmax_db == 63.0


def test_reorder_buffer_releases_frames_in_sequence_order() -> None:
    frames = list(frames_from_samples(sine(500.0, 0.1, 4.0, 16000), 16000, 120.0, "dev-1"))
    buffer = ReorderBuffer(window=10)
    released = [f.seq for f in buffer.push(frames[0])]
    released += [f.seq for f in buffer.push(frames[2])]
    released += [f.seq for f in buffer.push(frames[3])]
    released += [f.seq for f in buffer.push(frames[1])]
    assert released == [0, 1, 2, 3]


def test_reorder_buffer_gives_up_on_a_missing_frame_beyond_its_window() -> None:
    frames = list(frames_from_samples(sine(500.0, 0.1, 5.0, 16000), 16000, 120.0, "dev-1"))
    buffer = ReorderBuffer(window=2)
    released = [f.seq for f in buffer.push(frames[0])]
    for frame in frames[2:]:
        released += [f.seq for f in buffer.push(frame)]
    assert released == [0, 2, 3, 4]
    assert buffer.skipped == 1


def _reference_cut(scores: np.ndarray, core: np.ndarray, laeq: np.ndarray, laf: np.ndarray,
                   gap_steps: float, min_steps: float
                   ) -> list[tuple[int, int, float, float]]:  # fmt: skip
    """Brute force for ``span_cnn_floor``: the events of :func:`_reference_spans` (on 0.75, off
    0.5), each made of the steps of its runs that reached the on threshold; cut to its first
    and last core step among them (uncut when none), levels over its steps in the cut, then
    the short dropped. (start step, end step, LAeq, LAFmax)."""
    runs: list[tuple[int, int]] = []
    i = 0
    while i < scores.size:
        if scores[i] < 0.5:
            i += 1
            continue
        j = i
        while j < scores.size and scores[j] >= 0.5:
            j += 1
        if scores[i:j].max() >= 0.75:
            runs.append((i, j))
        i = j
    groups: list[list[tuple[int, int]]] = []
    for run in runs:
        if groups and run[0] - groups[-1][-1][1] < gap_steps:
            groups[-1].append(run)
        else:
            groups.append([run])
    out = []
    for group in groups:
        steps = [k for a, b in group for k in range(a, b)]
        marked = [k for k in steps if core[k]]
        if marked:
            steps = [k for k in steps if marked[0] <= k <= marked[-1]]
            start, end = marked[0], marked[-1] + 1
        else:
            start, end = group[0][0], group[-1][1]
        if end - start < min_steps:
            continue
        energy = float(np.mean(10.0 ** (laeq[steps] / 10.0)))
        out.append((start, end, round(10.0 * np.log10(energy), 2),
                    round(float(laf[steps].max()), 2)))
    return out


@settings(max_examples=200, deadline=None)
@given(
    levels=st.lists(st.integers(0, 4), min_size=1, max_size=120),
    marks=st.lists(st.booleans(), min_size=120, max_size=120),
    loud=st.lists(st.integers(40, 90), min_size=120, max_size=120),
    cuts=st.lists(st.integers(1, 119), max_size=6),
    gap_steps=st.integers(0, 6),
    min_steps=st.integers(0, 4),
)
def test_events_cut_to_their_core_equal_a_brute_force_reference(
    levels: list[int], marks: list[bool], loud: list[int], cuts: list[int], gap_steps: int,
    min_steps: int,
) -> None:
    scores = np.array(levels, dtype=np.float64) / 4.0
    n = scores.size
    core = np.array(marks[:n])
    laeq = np.array(loud[:n], dtype=np.float64)
    laf = laeq + 1.5
    config = DetectorSettings(on_threshold=0.75, off_threshold=0.5, merge_gap_s=gap_steps * HOP_S,
                              min_duration_s=min_steps * HOP_S)  # fmt: skip
    tracker = EventTracker("dev-1", config, "test")
    events = []
    bounds = [0, *sorted(c for c in set(cuts) if c < n), n]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        events += tracker.feed(a * HOP_NS, HOP_S, scores[a:b], laeq[a:b], laf[a:b], core[a:b])
    events += tracker.flush()
    got = [(e.onset_ns // HOP_NS, e.offset_ns // HOP_NS, e.laeq_db, e.lafmax_db)
           for e in events]
    assert got == _reference_cut(scores, core, laeq, laf, gap_steps, min_steps - 1e-6)


def test_a_fused_event_is_cut_to_where_the_cnn_hears_the_bark() -> None:
    # The fused score stays high over the fine-tuned network's whole patch (steps 0-47); the
    # CNN reaches the floor only over the bark (steps 20-34): the event is the bark's.
    scores = np.full(60, 0.1)
    scores[0:48] = 0.95
    cnn = np.full(60, 0.02)
    cnn[20:35] = 0.8
    laeq = np.where(cnn > 0.5, 70.0, 40.0)
    tracker = EventTracker("dev-1", DetectorSettings(on_threshold=0.9, off_threshold=0.7), "t")
    (event,) = (tracker.feed(0, HOP_S, scores, laeq, laeq + 3.0, cnn >= 0.1)
                + tracker.flush())
    assert (event.onset_ns, event.offset_ns) == (20 * HOP_NS, 35 * HOP_NS)
    assert (event.laeq_db, event.lafmax_db) == (70.0, 73.0)
    uncut = EventTracker("dev-1", DetectorSettings(on_threshold=0.9, off_threshold=0.7), "t")
    (whole,) = uncut.feed(0, HOP_S, scores, laeq, laeq + 3.0) + uncut.flush()
    assert (whole.onset_ns, whole.offset_ns) == (0, 48 * HOP_NS) and whole.laeq_db < 66.0
