"""Per-device analysis of frames in capture order: score every step, track events.

Pure logic: no sockets, no clock. Live analysis and offline analysis both feed frames here,
so they give the same events for the same frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer.config import DetectorSettings
from analyzer.detector import ProminenceDetector
from analyzer.events import DogEvent, EventTracker
from sensor.wire import Frame

# A jump in capture time larger than this between consecutive frames is a gap in coverage.
CONTINUITY_TOLERANCE_NS = 50_000_000


@dataclass(frozen=True)
class FrameResult:
    """What the pipeline made of one frame."""

    max_dog_score: float
    events: list[DogEvent] = field(default_factory=list)


class DevicePipeline:
    """Detector state and event tracker of one device; feed frames in capture order."""

    def __init__(self, device_id: str, settings: DetectorSettings) -> None:
        self.device_id = device_id
        self.settings = settings
        self.detector: ProminenceDetector | None = None
        self.tracker: EventTracker | None = None
        self._expected_ns: int | None = None

    @property
    def model_version(self) -> str:
        """Version of the scorer in use."""
        return ProminenceDetector.model_version

    def feed(self, frame: Frame) -> FrameResult:
        """Score one frame; return the events that ended with it."""
        if self.detector is None or self.tracker is None:
            self.detector = ProminenceDetector(self.settings, frame.mel_db.shape[1], frame.hop_s)
            self.tracker = EventTracker(self.device_id, self.settings, self.model_version)
        events: list[DogEvent] = []
        if (
            self._expected_ns is not None
            and abs(frame.capture_ns - self._expected_ns) > CONTINUITY_TOLERANCE_NS
        ):
            # Missing frames: neither silence nor barking. Close what was open, start afresh.
            events.extend(self.tracker.flush())
            self.detector.reset()
        scores = self.detector.scores(frame.mel_db)
        events.extend(
            self.tracker.feed(
                frame.capture_ns, frame.hop_s, scores, frame.laeq_steps_db, frame.laf_steps_db
            )
        )
        self._expected_ns = frame.end_ns
        return FrameResult(max_dog_score=float(scores.max(initial=0.0)), events=events)

    def flush(self) -> list[DogEvent]:
        """End open events (end of a file)."""
        return self.tracker.flush() if self.tracker is not None else []


class ReorderBuffer:
    """Restores sequence order per device for the pipeline (redelivery can reorder frames).

    Frames arriving ahead of the next expected sequence number wait; when more than ``window``
    wait, the missing ones are given up on and the pipeline moves on (the gap in capture time
    then closes open events). A frame older than the next expected one is late: it is still
    stored as a level point, but not scored.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self._next: int | None = None
        self._waiting: dict[int, Frame] = {}
        self.late = 0
        self.skipped = 0

    def push(self, frame: Frame) -> list[Frame]:
        """Add a frame; return the frames now ready, in order."""
        if self._next is None:
            self._next = frame.seq
        if frame.seq < self._next:
            self.late += 1
            return []
        self._waiting[frame.seq] = frame
        ready: list[Frame] = []
        while True:
            if self._next in self._waiting:
                ready.append(self._waiting.pop(self._next))
                self._next += 1
            elif len(self._waiting) > self.window:
                lowest = min(self._waiting)
                self.skipped += lowest - self._next
                self._next = lowest
            else:
                return ready
