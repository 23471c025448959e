"""Per-step dog scores become events: hysteresis, a minimum duration and a merge gap.

The scores arrive already smoothed (``smoothing_s``, a centred moving average in
``analyzer.classifier``). An event opens when a score reaches ``on_threshold`` and closes when
it falls below ``off_threshold``; events closer than ``merge_gap_s`` become one; events
shorter than ``min_duration_s`` are dropped. The confidence of an event is its peak score.

Pure logic over arrays; times are capture times in ns so that live and offline analysis
give the same events for the same frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: analyzer.config imports modules that import this one
    from analyzer.config import DetectorSettings


@dataclass(frozen=True)
class DogEvent:
    """One dog vocalization (or a merged run of them)."""

    device_id: str
    onset_ns: int
    offset_ns: int
    label: str
    confidence: float
    laeq_db: float
    lafmax_db: float
    model_version: str

    @property
    def duration_s(self) -> float:
        """Length of the event, seconds."""
        return (self.offset_ns - self.onset_ns) / 1e9


@dataclass
class _Open:
    onset_ns: int
    offset_ns: int
    peak_score: float
    energy_sum: float  # sum of 10**(LAeq/10) over steps (equal step lengths)
    steps: int
    lafmax_db: float


class EventTracker:
    """Turns per-step scores and levels into :class:`DogEvent` objects for one device."""

    def __init__(self, device_id: str, settings: DetectorSettings, model_version: str) -> None:
        self.device_id = device_id
        self.settings = settings
        self.model_version = model_version
        self._current: _Open | None = None  # scores still above the off threshold
        self._held: _Open | None = None  # ended, waiting to see whether the next one merges

    def feed(
        self,
        start_ns: int,
        hop_s: float,
        scores: np.ndarray,
        laeq_db: np.ndarray,
        laf_db: np.ndarray,
    ) -> list[DogEvent]:
        """Consume consecutive steps starting at ``start_ns``; return events that ended."""
        done: list[DogEvent] = []
        hop_ns = round(hop_s * 1e9)
        s = self.settings
        if self._current is None and self._held is None and not np.any(scores >= s.on_threshold):
            return done  # nothing open and nothing opens: the common case, without a loop
        for i, score in enumerate(scores):
            t0 = start_ns + i * hop_ns
            t1 = t0 + hop_ns
            if self._held is not None and t0 - self._held.offset_ns >= s.merge_gap_s * 1e9:
                done.extend(self._emit(self._held))
                self._held = None
            if self._current is None:
                if score >= s.on_threshold:
                    if self._held is not None:  # within the merge gap: continue that event
                        self._current, self._held = self._held, None
                        self._current.offset_ns = t1
                    else:
                        self._current = _Open(t0, t1, 0.0, 0.0, 0, -np.inf)
            elif score < s.off_threshold:
                self._held, self._current = self._current, None
            if self._current is not None:
                c = self._current
                c.offset_ns = t1
                c.peak_score = max(c.peak_score, float(score))
                c.energy_sum += float(10.0 ** (laeq_db[i] / 10.0))
                c.steps += 1
                c.lafmax_db = max(c.lafmax_db, float(laf_db[i]))
        return done

    def flush(self) -> list[DogEvent]:
        """End whatever is open (end of file, or a gap in the data)."""
        done: list[DogEvent] = []
        for pending in (self._held, self._current):
            if pending is not None:
                done.extend(self._emit(pending))
        self._held = self._current = None
        return done

    def _emit(self, event: _Open) -> list[DogEvent]:
        if (
            event.steps == 0
            or event.offset_ns - event.onset_ns < self.settings.min_duration_s * 1e9
        ):
            return []
        return [
            DogEvent(
                device_id=self.device_id,
                onset_ns=event.onset_ns,
                offset_ns=event.offset_ns,
                label="dog",
                confidence=round(event.peak_score, 4),
                laeq_db=round(float(10.0 * np.log10(event.energy_sum / event.steps)), 2),
                lafmax_db=round(event.lafmax_db, 2),
                model_version=self.model_version,
            )
        ]
