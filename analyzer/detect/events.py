"""Per-step dog scores become events: hysteresis, a minimum duration and a merge gap.

The scores arrive already smoothed (``smoothing_s``, a centred moving average in
``analyzer.detect.classifier``). Double-threshold hysteresis: an event is a run of steps scoring at
least ``off_threshold`` in which some step reaches ``on_threshold`` — it opens where the score
rose above the off threshold (not where it first reached the on threshold) and closes where it
falls below the off threshold; events closer than ``merge_gap_s`` become one; events shorter
than ``min_duration_s`` are dropped. The confidence of an event is its peak score.

With ``bout_context_s`` set, :class:`BoutTracker` adds what barking is (issue 39, item 2): barks
come in bouts, so a weaker candidate near an event, or among enough other candidates, is an
event too; a lone weak sound is not.

Pure logic over arrays; times are capture times in ns so that live and offline analysis
give the same events for the same frames.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from analyzer.detect.settings import DetectorSettings


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
    # Whose dog (issue 36): the event's compass bearing and its half-width from the bearings
    # of the dog frames it spans, and its origin against the premises' sector ("premises",
    # "elsewhere" or "no bearing"; analyzer.acoustics.attribution sets all three).
    bearing_deg: float | None = None
    bearing_uncertainty_deg: float | None = None
    origin: str = "no bearing"

    @property
    def duration_s(self) -> float:
        """Length of the event, seconds."""
        return (self.offset_ns - self.onset_ns) / 1e9


@dataclass
class _Span:
    """Energy, step count and LAFmax of a stretch of steps (equal step lengths)."""

    energy_sum: float = 0.0  # sum of 10**(LAeq/10) over steps
    steps: int = 0
    lafmax_db: float = -np.inf

    def add(self, energy: float, steps: int, lafmax_db: float) -> None:
        self.energy_sum += energy
        self.steps += steps
        self.lafmax_db = max(self.lafmax_db, lafmax_db)

    def take(self, other: _Span) -> None:
        self.add(other.energy_sum, other.steps, other.lafmax_db)


@dataclass
class _Open:
    """A run of steps. Its energy, step count and LAFmax are kept as ``lead``: every step while
    no step is a core step. With a core (``DetectorSettings.span_cnn_floor``: steps where the
    CNN's own score reaches the floor) they are kept as three stretches: ``lead`` before the
    first core step, ``core`` from the first to the last, ``tail`` after it; the event is then
    the core's extent and levels (:meth:`EventTracker._emit`)."""

    onset_ns: int
    offset_ns: int
    peak_score: float
    lead: _Span
    core: _Span | None = None
    tail: _Span | None = None
    core_onset_ns: int = 0
    core_offset_ns: int = 0

    def _after(self) -> _Span:
        """Where a step that is not a core step goes."""
        if self.core is None:
            return self.lead
        if self.tail is None:
            self.tail = _Span()
        return self.tail

    def add(self, t1_ns: int, score: float, laeq_db: float, laf_db: float,
            core: bool = False, hop_ns: int = 0) -> None:
        """Extend by one step ending at ``t1_ns`` (a core step when ``core``)."""
        self.offset_ns = t1_ns
        self.peak_score = max(self.peak_score, score)
        energy = 10.0 ** (laeq_db / 10.0)
        if not core:
            self._after().add(energy, 1, laf_db)
            return
        if self.core is None:
            self.core, self.core_onset_ns = _Span(), t1_ns - hop_ns
        elif self.tail is not None:
            self.core.take(self.tail)
            self.tail = None
        self.core.add(energy, 1, laf_db)
        self.core_offset_ns = t1_ns

    def absorb(self, other: _Open) -> None:
        """Take in a later run of steps (a merge)."""
        self.offset_ns = other.offset_ns
        self.peak_score = max(self.peak_score, other.peak_score)
        if other.core is None:
            self._after().take(other.lead)
            return
        if self.core is None:  # the merged core is the later run's
            self.lead.take(other.lead)
            self.core, self.core_onset_ns = other.core, other.core_onset_ns
        else:
            self._after().take(other.lead)
            assert self.tail is not None
            self.core.take(self.tail)
            self.core.take(other.core)
        self.core_offset_ns, self.tail = other.core_offset_ns, other.tail


def _run_of(start_ns: int, hop_ns: int, scores: np.ndarray, laeq_db: np.ndarray,
            laf_db: np.ndarray, core: np.ndarray | None = None) -> _Open:  # fmt: skip
    """The steps given, as one run starting at ``start_ns`` (``core``: which are core steps)."""
    energy = 10.0 ** (np.asarray(laeq_db, np.float64) / 10.0)

    def span(a: int, b: int) -> _Span:
        return _Span(float(energy[a:b].sum()), b - a, float(np.max(laf_db[a:b], initial=-np.inf)))

    n = scores.size
    run = _Open(start_ns, start_ns + n * hop_ns, float(scores.max()), span(0, n))
    marked = np.flatnonzero(core) if core is not None else np.zeros(0, np.int64)
    if marked.size:
        first, last = int(marked[0]), int(marked[-1]) + 1
        run.lead, run.core = span(0, first), span(first, last)
        run.tail = span(last, n) if last < n else None
        run.core_onset_ns, run.core_offset_ns = start_ns + first * hop_ns, start_ns + last * hop_ns
    return run


class EventTracker:
    """Turns per-step scores and levels into :class:`DogEvent` objects for one device."""

    def __init__(self, device_id: str, settings: DetectorSettings, model_version: str) -> None:
        self.device_id = device_id
        self.settings = settings
        self.model_version = model_version
        self._current: _Open | None = None  # reached the on threshold, still above the off one
        self._held: _Open | None = None  # ended, waiting to see whether the next one merges
        self._rising: _Open | None = None  # above the off threshold, not yet at the on one

    def feed(
        self,
        start_ns: int,
        hop_s: float,
        scores: np.ndarray,
        laeq_db: np.ndarray,
        laf_db: np.ndarray,
        core: np.ndarray | None = None,
    ) -> list[DogEvent]:
        """Consume consecutive steps starting at ``start_ns``; return events that ended.
        ``core`` (per step, optional): the steps an event's extent and levels are cut to
        (:class:`_Open`); an event without a core step keeps its whole extent."""
        done: list[DogEvent] = []
        hop_ns = round(hop_s * 1e9)
        s = self.settings
        scores = np.asarray(scores, dtype=np.float64)
        if scores.size == 0:
            return done
        if self._current is None and self._held is None and not np.any(scores >= s.on_threshold):
            self._follow_rising(start_ns, hop_ns, scores, laeq_db, laf_db, core)
            return done  # nothing open and nothing opens: the common case, without a loop
        gap_ns = s.merge_gap_s * 1e9
        for i, score in enumerate(scores):
            t0 = start_ns + i * hop_ns
            t1 = t0 + hop_ns
            is_core = core is not None and bool(core[i])
            if self._current is not None:
                if score < s.off_threshold:
                    self._held, self._current = self._current, None
                else:
                    self._current.add(t1, float(score), float(laeq_db[i]), float(laf_db[i]),
                                      is_core, hop_ns)
                continue
            if score >= s.off_threshold:
                if self._rising is None:
                    self._rising = _Open(t0, t0, 0.0, _Span())
                self._rising.add(t1, float(score), float(laeq_db[i]), float(laf_db[i]),
                                 is_core, hop_ns)
            else:
                self._rising = None
            held = self._held
            if held is not None and t0 - held.offset_ns >= gap_ns and (
                self._rising is None or self._rising.onset_ns - held.offset_ns >= gap_ns
            ):
                done.extend(self._emit(held))
                self._held = None
            if self._rising is not None and score >= s.on_threshold:
                if self._held is not None:  # rose within the merge gap: continue that event
                    self._held.absorb(self._rising)
                    self._current, self._held = self._held, None
                else:
                    self._current = self._rising
                self._rising = None
        return done

    def _follow_rising(self, start_ns: int, hop_ns: int, scores: np.ndarray, laeq_db: np.ndarray,
                       laf_db: np.ndarray, core: np.ndarray | None = None) -> None:  # fmt: skip
        """Keep the run of steps above the off threshold that ends these steps (none reach
        the on threshold): an event that opens later starts where that run began."""
        below = np.flatnonzero(scores < self.settings.off_threshold)
        first = 0 if below.size == 0 else int(below[-1]) + 1
        if first == scores.size:
            self._rising = None
            return
        run = _run_of(start_ns + first * hop_ns, hop_ns, scores[first:], laeq_db[first:],
                      laf_db[first:], None if core is None else core[first:])  # fmt: skip
        if first == 0 and self._rising is not None:
            self._rising.absorb(run)
        else:
            self._rising = run

    def pending_onset_ns(self) -> int | None:
        """The earliest onset of a run still open or held (None: none), where an event still
        to come may start."""
        onsets = [run.onset_ns for run in (self._held, self._current, self._rising)
                  if run is not None]
        return min(onsets, default=None)

    def flush(self) -> list[DogEvent]:
        """End whatever is open (end of file, or a gap in the data)."""
        done: list[DogEvent] = []
        for pending in (self._held, self._current):
            if pending is not None:
                done.extend(self._emit(pending))
        self._held = self._current = self._rising = None
        return done

    def _emit(self, event: _Open) -> list[DogEvent]:
        onset, offset, span = event.onset_ns, event.offset_ns, event.lead
        if event.core is not None:  # cut to the core
            onset, offset, span = event.core_onset_ns, event.core_offset_ns, event.core
        if span.steps == 0 or offset - onset < self.settings.min_duration_s * 1e9:
            return []
        return [
            DogEvent(
                device_id=self.device_id,
                onset_ns=onset,
                offset_ns=offset,
                label="dog",
                confidence=round(event.peak_score, 4),
                laeq_db=round(float(10.0 * np.log10(span.energy_sum / span.steps)), 2),
                lafmax_db=round(span.lafmax_db, 2),
                model_version=self.model_version,
            )
        ]


class BoutTracker:
    """Events with bout context: barking repeats, a lone weak sound does not.

    One :class:`EventTracker` at the candidate thresholds (``bout_on_threshold`` /
    ``bout_off_threshold``, merge gap and minimum duration as set) finds candidates. A candidate
    whose peak reaches ``on_threshold`` (a bark as clear as the plain tracker needs) is confirmed
    by itself. Candidates form chains, each starting less than ``bout_context_s`` after the
    previous one ended; once a chain holds a confirmed candidate or ``bout_min_events``
    candidates, all of its candidates, earlier and later, are events. An unconfirmed chain is
    dropped when the next candidate starts too late, at a gap in the data or at the end.

    Events of a confirmed chain leave as they end, as the plain tracker's do; candidates wait
    for their chain's confirmation (at most ``bout_min_events - 1`` of them are held). Event
    extents follow the candidate thresholds, so they are a little wider than the plain
    tracker's.
    """

    def __init__(self, device_id: str, settings: DetectorSettings, model_version: str) -> None:
        self.settings = settings
        self._candidates = EventTracker(device_id, replace(
            settings, on_threshold=settings.bout_on_threshold,
            off_threshold=settings.bout_off_threshold), model_version)  # fmt: skip
        self._chain: list[DogEvent] = []  # unconfirmed candidates of the current chain
        self._confirmed = False  # whether the current chain is confirmed
        self._chain_end_ns: int | None = None  # where the current chain's last candidate ended

    def feed(self, start_ns: int, hop_s: float, scores: np.ndarray, laeq_db: np.ndarray,
             laf_db: np.ndarray, core: np.ndarray | None = None) -> list[DogEvent]:  # fmt: skip
        """Consume consecutive steps (as :meth:`EventTracker.feed`); return confirmed events."""
        return self._chained(self._candidates.feed(start_ns, hop_s, scores, laeq_db, laf_db,
                                                   core))

    def pending_onset_ns(self) -> int | None:
        """The earliest onset of a candidate still held or open (None: none)."""
        onsets = [c.onset_ns for c in self._chain[:1]]
        pending = self._candidates.pending_onset_ns()
        return min(onsets + ([] if pending is None else [pending]), default=None)

    def flush(self) -> list[DogEvent]:
        """End whatever is open; the context ends here too (a gap in the data, the end)."""
        done = self._chained(self._candidates.flush())
        self._chain, self._confirmed, self._chain_end_ns = [], False, None
        return done

    def _chained(self, candidates: list[DogEvent]) -> list[DogEvent]:
        done: list[DogEvent] = []
        s = self.settings
        context_ns = round(s.bout_context_s * 1e9)
        for candidate in candidates:  # in order of time
            if self._chain_end_ns is None or candidate.onset_ns - self._chain_end_ns >= context_ns:
                self._chain, self._confirmed = [], False  # a new chain: drop the unconfirmed
            self._chain_end_ns = candidate.offset_ns
            if self._confirmed:
                done.append(candidate)
                continue
            self._chain.append(candidate)
            if candidate.confidence >= s.on_threshold or len(self._chain) >= s.bout_min_events:
                done.extend(self._chain)
                self._chain, self._confirmed = [], True
        return done


def event_tracker(device_id: str, settings: DetectorSettings,
                  model_version: str) -> EventTracker | BoutTracker:  # fmt: skip
    """The tracker ``settings`` ask for: with bout context when ``bout_context_s`` > 0."""
    if settings.bout_context_s > 0:
        return BoutTracker(device_id, settings, model_version)
    return EventTracker(device_id, settings, model_version)
