"""Per-device analysis of frames in capture order: score every step, track events.

Pure logic: no sockets, no clock. Live analysis and offline analysis both feed frames here,
so they give the same events for the same frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzer.classifier import DogClassifier
from analyzer.config import DetectorSettings
from analyzer.detector import make_scorer, model_version
from analyzer.events import DogEvent, EventTracker
from sensor.wire import Frame

# A jump in capture time larger than this between consecutive frames is a gap in coverage.
CONTINUITY_TOLERANCE_NS = 50_000_000


@dataclass(frozen=True)
class FrameResult:
    """What the pipeline made of one frame.

    The classifier looks ``context_steps`` ahead (0.64 s for the bundled model), so the step
    scores of a frame lag its rows: ``step_scores`` are the scores that became final with this
    frame, for consecutive 20 ms steps starting at capture time ``scores_start_ns``;
    ``max_dog_score`` is their maximum. The held-back steps at the end of a stream come with
    :meth:`DevicePipeline.finish`.
    """

    max_dog_score: float
    events: list[DogEvent] = field(default_factory=list)
    scores_start_ns: int = 0
    step_scores: np.ndarray = field(default_factory=lambda: np.zeros(0))


class DevicePipeline:
    """Classifier state and event tracker of one device; feed frames in capture order."""

    def __init__(self, device_id: str, settings: DetectorSettings) -> None:
        self.device_id = device_id
        self.settings = settings
        self.detector: DogClassifier | None = None
        self.tracker: EventTracker | None = None
        self._expected_ns: int | None = None
        self._hop_ns = 0
        self._scores_ns: int | None = None  # capture time of the next step to be scored
        self._laeq = np.zeros(0, dtype=np.float32)  # levels of steps not yet scored
        self._laf = np.zeros(0, dtype=np.float32)

    @property
    def model_version(self) -> str:
        """Version of the classifier model in use."""
        return model_version(self.settings)

    def feed(self, frame: Frame) -> FrameResult:
        """Score one frame; return the events that ended with it."""
        if self.detector is None or self.tracker is None:
            self.detector = make_scorer(self.settings, frame.hop_s)
            self.tracker = EventTracker(self.device_id, self.settings, self.model_version)
            self._hop_ns = round(frame.hop_s * 1e9)
        events: list[DogEvent] = []
        if (
            self._expected_ns is not None
            and abs(frame.capture_ns - self._expected_ns) > CONTINUITY_TOLERANCE_NS
        ):
            # Missing frames: neither silence nor barking. Close what was open, start afresh.
            events.extend(self._drain().events)
        if self._scores_ns is None:
            self._scores_ns = frame.capture_ns
        self._laeq = np.concatenate([self._laeq, frame.laeq_steps_db])
        self._laf = np.concatenate([self._laf, frame.laf_steps_db])
        start_ns = self._scores_ns
        scores = self.detector.scores(frame.mel_db)
        events.extend(self._track(scores))
        self._expected_ns = frame.end_ns
        return FrameResult(
            max_dog_score=float(scores.max(initial=0.0)),
            events=events,
            scores_start_ns=start_ns,
            step_scores=scores,
        )

    def _track(self, scores: np.ndarray) -> list[DogEvent]:
        assert self.tracker is not None and self._scores_ns is not None
        n = scores.size
        events = self.tracker.feed(
            self._scores_ns, self._hop_ns / 1e9, scores, self._laeq[:n], self._laf[:n]
        )
        self._laeq, self._laf = self._laeq[n:], self._laf[n:]
        self._scores_ns += n * self._hop_ns
        return events

    def _drain(self) -> FrameResult:
        """Score the held-back steps, close open events and forget all context."""
        if self.detector is None or self.tracker is None or self._scores_ns is None:
            return FrameResult(max_dog_score=0.0)
        start_ns = self._scores_ns
        scores = self.detector.flush()
        events = self._track(scores)
        events.extend(self.tracker.flush())
        self._scores_ns = None
        self._laeq = self._laf = np.zeros(0, dtype=np.float32)
        return FrameResult(float(scores.max(initial=0.0)), events, start_ns, scores)

    def finish(self) -> FrameResult:
        """End of a stream (a file): the held-back steps' scores and the events still open."""
        result = self._drain()
        self._expected_ns = None
        return result

    def flush(self) -> list[DogEvent]:
        """End open events (end of a file)."""
        return self.finish().events


class ReorderBuffer:
    """Restores sequence order per device for the pipeline (redelivery can reorder frames).

    Frames arriving ahead of the next expected sequence number wait. The missing ones are
    given up on (``gaps`` and ``skipped`` count them) when more than ``window`` frames wait,
    or, with :meth:`expire`, when the oldest waiting frame has waited ``max_wait_s`` (by the
    caller's clock, ``now_s``); the pipeline then moves on and the gap in capture time closes
    open events. A frame older than the next expected one is late (``late``): it is stored,
    not scored. A frame numbered below the next expected one but captured after every frame
    released so far is a sequence restart (``restarts``: a sensor whose outbox was wiped
    counts from 0 again, or the first frame carried a wild number): the waiting frames are
    released and counting starts again from it, so no number a frame once carried decides how
    later frames are treated.
    """

    # A forged sequence number can jump by 2**62: count at most this many frames per gap,
    # so the counter stays meaningful and fits InfluxDB's 64-bit integers.
    MAX_COUNTED_GAP = 1_000_000

    def __init__(self, window: int, max_wait_s: float = float("inf")) -> None:
        self.window = window
        self.max_wait_s = max_wait_s
        self._next: int | None = None
        self._waiting: dict[int, tuple[Frame, float]] = {}  # seq -> (frame, arrival s)
        self._released_ns: int | None = None  # capture time of the latest frame released
        self.late = 0
        self.skipped = 0
        self.gaps = 0
        self.restarts = 0

    def push(self, frame: Frame, now_s: float = 0.0) -> list[Frame]:
        """Add a frame that arrived at ``now_s``; return the frames now ready, in order."""
        ready: list[Frame] = []
        if self._next is None:
            self._next = frame.seq
        elif frame.seq < self._next:
            if self._released_ns is None or frame.capture_ns <= self._released_ns:
                self.late += 1
                return []
            self.restarts += 1
            ready = self.release_all()
            self._next = frame.seq
        self._waiting[frame.seq] = (frame, now_s)
        return ready + self._release()

    def expire(self, now_s: float) -> list[Frame]:
        """Give up the gaps before every frame that has waited ``max_wait_s`` at ``now_s``;
        return the frames now ready, in order."""
        stale = [seq for seq, (_, arrived_s) in self._waiting.items()
                 if now_s - arrived_s >= self.max_wait_s]
        return self._release(through_seq=max(stale)) if stale else []

    def release_all(self) -> list[Frame]:
        """Give up every gap; return all waiting frames, in order (the device went quiet)."""
        return self._release(through_seq=max(self._waiting, default=None))

    @property
    def waiting(self) -> int:
        """Frames held for a missing predecessor."""
        return len(self._waiting)

    @property
    def next_seq(self) -> int | None:
        """The sequence number expected next (None before the first frame)."""
        return self._next

    def _release(self, through_seq: int | None = None) -> list[Frame]:
        """Release the frames that are in order; give up gaps while more than ``window``
        wait or while a frame numbered ``through_seq`` or below waits."""
        ready: list[Frame] = []
        while self._waiting:
            assert self._next is not None
            if self._next in self._waiting:
                frame = self._waiting.pop(self._next)[0]
                ready.append(frame)
                self._released_ns = frame.capture_ns
                self._next += 1
                continue
            lowest = min(self._waiting)
            if len(self._waiting) <= self.window and (through_seq is None or lowest > through_seq):
                break
            self.gaps += 1
            self.skipped += min(lowest - self._next, self.MAX_COUNTED_GAP)
            self._next = lowest
        return ready
