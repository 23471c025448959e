"""Per-device analysis of frames in capture order: score every step, track events.

Pure logic: no sockets, no clock. Live analysis and offline analysis both feed frames here,
so they give the same events for the same frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzer.detect.classifier import DogClassifier
from analyzer.detect.detector import make_scorer, model_version
from analyzer.detect.events import DogEvent, EventTracker
from analyzer.detect.settings import DetectorSettings
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
