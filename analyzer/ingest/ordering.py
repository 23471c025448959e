"""Ordering of one device's frames: sequence order restored before the pipeline scores them.

Pure logic over frames and a clock passed in: redelivery after a reconnect can reorder
frames, a sensor may lose some, and one whose outbox was wiped counts from 0 again.
"""

from __future__ import annotations

from sensor.wire import Frame


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

    def restamp(self, now_s: float) -> None:
        """The waiting frames arrived at ``now_s`` (restored after a restart, whose clock may
        not continue the old process's): each waits ``max_wait_s`` again at most."""
        self._waiting = {seq: (frame, now_s) for seq, (frame, _) in self._waiting.items()}

    def held(self) -> dict[tuple[int, int], Frame]:
        """The waiting frames by (seq, capture ns)."""
        return {(seq, frame.capture_ns): frame for seq, (frame, _) in self._waiting.items()}

    def without_held(self) -> ReorderBuffer:
        """A copy of this buffer's counting state without its waiting frames (the journal
        keeps those as rows of their own, ``analyzer.ingest.journal``)."""
        copy = ReorderBuffer(self.window, self.max_wait_s)
        copy.__dict__.update({k: v for k, v in self.__dict__.items() if k != "_waiting"})
        copy._waiting = {}
        return copy

    def hold_again(self, frames: list[Frame], now_s: float) -> None:
        """Make ``frames`` wait again (restored after a restart), as arrived at ``now_s``."""
        for frame in frames:
            self._waiting[frame.seq] = (frame, now_s)

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
