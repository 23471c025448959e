"""Glencoe MN section 701 (Subd. 1 P, Subd. 5) as two streaming rules over dog events.

Pure logic: no clock is read, no I/O. Times are capture times in integer ns (epoch ns live,
ns from the start of the file offline); every comparison is on integers, so 7:00.0 and
7:00.1 fall on the sides the ordinance says. docs/RULES.md gives the operational definitions.

- **Continuous** (Subd. 5 "more than seven minutes continuously"): counted events whose gaps
  (end of the episode so far to the next event's start) are under ``continuity_gap_s`` form
  an episode, a violation when ``end - start > continuous_limit_s``; a gap of exactly the
  continuity gap ends it ("under 60 s").
- **Intermittent** (Subd. 5 "intermittent barking that continues for more than one hour and is
  plainly audible from a distance of 100 feet"): the same grouping with
  ``intermittency_gap_s`` over the events plainly audible 100 ft from the premises; a
  violation when the stretch lasts more than ``intermittent_limit_s``. Such an event counts
  only in company (``intermittent_company_s``): another counted event within that time of it,
  or the event itself that long. Intermittent *barking* is bouts of barks; one sound alone in
  a gap of ten minutes (a gull, a rooster the detector took for a dog) does not carry the
  stretch across it (docs/RULES.md).

The engine holds events for ``reorder_window_s`` of capture time so that events arriving out
of order (or twice) give the same findings as a sorted replay; see :class:`RuleEngine`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from analyzer.acoustics import EventAudibility
from analyzer.acoustics.attribution import NO_BEARING
from analyzer.detect import DogEvent
from analyzer.errors import AnalyzerError
from analyzer.ordinance.coverage import Coverage
from sensor.configfile import ConfigError, setting

log = logging.getLogger(__name__)

CONTINUOUS = "continuous"
INTERMITTENT = "intermittent"
RULES = (CONTINUOUS, INTERMITTENT)
ONGOING = "ongoing"
COMPLETED = "completed"
NS = 1_000_000_000
SENSITIVITY_CONTINUITY_GAPS_S = (30.0, 60.0, 120.0)
SENSITIVITY_INTERMITTENCY_GAPS_S = (300.0, 600.0, 900.0)


class RuleInputError(AnalyzerError):
    """An event or coverage interval the rules cannot use (e.g. it ends before it starts)."""


@dataclass(frozen=True)
class RuleSettings:
    """The ordinance rules' parameters (docs/RULES.md); printed with every finding."""

    continuous_limit_s: float = setting(
        420.0, "an episode is a violation when it lasts more than this, s (Subd. 5: seven "
        "minutes)", 60.0, 7200.0)
    continuity_gap_s: float = setting(
        60.0, "gaps under this keep an episode continuous, s (neighbouring Minnesota codes: "
        "'less than one minute of interruption')", 1.0, 600.0)
    intermittent_limit_s: float = setting(
        3600.0, "a stretch is a violation when it lasts more than this, s (Subd. 5: one hour)",
        600.0, 86400.0)
    intermittency_gap_s: float = setting(
        600.0, "gaps under this keep intermittent barking one stretch, s", 60.0, 3600.0)
    intermittent_company_s: float = setting(
        60.0, "an event counts towards the intermittent rule only when another event that "
        "counts lies within this time of it (end to start), or it lasts this long itself, s "
        "(barking in bouts, not one sound alone; 0: every plainly audible event counts)",
        0.0, 600.0)
    audibility_binds_continuous: bool = setting(
        False, "count only plainly audible events for the continuous rule too (default: the "
        "100 ft clause qualifies only intermittent barking)")
    reorder_window_s: float = setting(
        120.0, "events are held this long (capture time) to restore their order, s; "
        "an event older than that on arrival is late: counted and dropped", 0.0, 3600.0)

    def __post_init__(self) -> None:
        if self.intermittent_company_s > self.intermittency_gap_s:
            raise ConfigError(
                f"config key 'rules.intermittent_company_s' ({self.intermittent_company_s:g} "
                f"s) is longer than 'rules.intermittency_gap_s' ({self.intermittency_gap_s:g} "
                "s): an event's company must lie within the gap that keeps a stretch together")

    def company_ns(self, rule: str) -> int:
        """How near another counted event must be for an event to count towards ``rule``
        (0: no company needed), ns."""
        return round(self.intermittent_company_s * NS) if rule == INTERMITTENT else 0

    def gap_ns(self, rule: str) -> int:
        """The grouping gap of ``rule``, ns."""
        gap = self.continuity_gap_s if rule == CONTINUOUS else self.intermittency_gap_s
        return round(gap * NS)

    def limit_ns(self, rule: str) -> int:
        """The duration a group of ``rule`` must exceed to be a violation, ns."""
        limit = self.continuous_limit_s if rule == CONTINUOUS else self.intermittent_limit_s
        return round(limit * NS)

    def counts(self, rule: str, event: RuleEvent) -> bool:
        """Whether ``event`` counts towards ``rule`` under this reading of Subd. 5."""
        if rule == INTERMITTENT or self.audibility_binds_continuous:
            return event.plainly_audible is True  # unknown audibility never counts
        return True

    def reading(self, rule: str) -> str:
        """How the ordinance was read for ``rule``, stated in every finding."""
        if rule == INTERMITTENT:
            company = "" if not self.intermittent_company_s else (
                f", and only in company: another such event within "
                f"{self.intermittent_company_s:g} s, or one lasting that long (barking in "
                "bouts; one sound alone does not carry a stretch)")
            return ("intermittent: only dog vocalizations plainly audible 100 ft from the "
                    "premises count (Subd. 5); events of unknown audibility do not count"
                    + company)
        if self.audibility_binds_continuous:
            return ("continuous: only dog vocalizations plainly audible 100 ft from the "
                    "premises count (the 100 ft clause read as binding both rules)")
        return ("continuous: every dog vocalization counts (the 100 ft clause of Subd. 5 read "
                "as qualifying intermittent barking only)")


@dataclass(frozen=True)
class RuleEvent:
    """A dog event with the audibility facts the rules use, exactly as stored in InfluxDB.

    Audibility fields are None when the event was not assessed (no installation record, or
    its frames were gone); such an event never counts as plainly audible."""

    device_id: str
    onset_ns: int
    offset_ns: int
    label: str
    confidence: float
    laeq_db: float
    lafmax_db: float
    model_version: str
    plainly_audible: bool | None = None
    audibility_margin_db: float | None = None
    level_at_100ft_db: float | None = None
    uncertainty_db: float | None = None
    audibility_score: float | None = None
    # Whose dog (issue 36): the event's compass bearing, its half-width and its origin
    # against the premises' sector, as stored ("premises", "elsewhere" or "no bearing").
    bearing_deg: float | None = None
    bearing_uncertainty_deg: float | None = None
    origin: str = NO_BEARING

    def __post_init__(self) -> None:
        if self.offset_ns < self.onset_ns:
            raise RuleInputError(f"event of {self.device_id} at {self.onset_ns} ns ends at "
                                 f"{self.offset_ns} ns, before it starts")

    @property
    def key(self) -> tuple[int, int, str]:
        """Identity for de-duplication and ordering: (onset, offset, label)."""
        return (self.onset_ns, self.offset_ns, self.label)


def rule_event(event: DogEvent, audibility: EventAudibility | None) -> RuleEvent:
    """The :class:`RuleEvent` of a detected event, audibility rounded as it is stored
    (:meth:`EventAudibility.as_dict`), so live findings equal those recomputed from storage."""
    fields = {} if audibility is None else audibility.as_dict()
    return RuleEvent(
        device_id=event.device_id, onset_ns=int(event.onset_ns), offset_ns=int(event.offset_ns),
        label=event.label, confidence=float(event.confidence), laeq_db=float(event.laeq_db),
        lafmax_db=float(event.lafmax_db), model_version=event.model_version,
        plainly_audible=None if audibility is None else bool(audibility.plainly_audible),
        audibility_margin_db=_opt(fields.get("audibility_margin_db")),
        level_at_100ft_db=_opt(fields.get("level_at_100ft_db")),
        uncertainty_db=_opt(fields.get("uncertainty_db")),
        audibility_score=_opt(fields.get("audibility_score")),
        bearing_deg=event.bearing_deg, bearing_uncertainty_deg=event.bearing_uncertainty_deg,
        origin=event.origin,
    )


def _opt(value: object) -> float | None:
    if value is None or isinstance(value, int | float):
        return None if value is None else float(value)
    raise RuleInputError(f"audibility value {value!r} is not a number")


@dataclass(frozen=True)
class Finding:
    """An episode or stretch that broke a rule. ``status`` is ``ongoing`` from the moment the
    threshold was crossed and ``completed`` once no event can extend it. ``events`` are all
    events whose onset lies in [start, end] (counted or not), in capture order."""

    device_id: str
    rule: str
    status: str
    start_ns: int
    end_ns: int
    events: tuple[RuleEvent, ...]
    settings: RuleSettings
    coverage_gaps: tuple[tuple[int, int], ...] = ()
    uncovered_after_end_ns: int = 0

    @property
    def duration_s(self) -> float:
        """Length of the episode or stretch, s."""
        return (self.end_ns - self.start_ns) / NS

    @property
    def threshold_crossed_ns(self) -> int:
        """The instant after which the group had lasted more than the limit."""
        return self.start_ns + self.settings.limit_ns(self.rule)

    @property
    def close_ns(self) -> int:
        """``end + gap``: when no later event could extend it; orders the evidence chain."""
        return self.end_ns + self.settings.gap_ns(self.rule)

    @property
    def counted(self) -> tuple[RuleEvent, ...]:
        """The events that formed it under the rule's reading (company included: an
        event's company, when counted, lies in the same span)."""
        return tuple(counted_events(self.rule, self.settings, self.events))


@dataclass
class _Group:
    start_ns: int
    end_ns: int
    counted: int
    events: list[RuleEvent]
    raised: bool = False


class _Tracker:
    """One rule's open group over settled events (capture order)."""

    def __init__(self, device_id: str, rule: str, settings: RuleSettings) -> None:
        self.device_id, self.rule, self.settings = device_id, rule, settings
        self.gap_ns, self.limit_ns = settings.gap_ns(rule), settings.limit_ns(rule)
        self.company_ns = settings.company_ns(rule)
        self.group: _Group | None = None
        self._tied: list[RuleEvent] = []  # uncounted events at the latest onset, no group open
        # latest end of the settled events the reading counts, for the next one's company
        self.latest_end_ns: int | None = None

    def company(self, pending: Sequence[RuleEvent], i: int,
                frontier_ns: int | None) -> bool | None:
        """Whether ``pending[i]`` counts (:func:`counted_events`) given the settled events
        before it and the pending ones after it (``pending`` in capture order); None while the
        company that would decide it may still arrive (its end plus the company time is not
        yet settled)."""
        event = pending[i]
        if not self.settings.counts(self.rule, event):
            return False
        w = self.company_ns
        later = next((pending[j].onset_ns for j in range(i + 1, len(pending))
                      if self.settings.counts(self.rule, pending[j])), None) if w else None
        if _in_company(event, self.latest_end_ns, later, w):
            return True
        if frontier_ns is not None and event.offset_ns + w > frontier_ns:
            return None  # company may still arrive before the next known event
        return False

    def add(self, event: RuleEvent, counted: bool, coverage: Coverage, out: list[Finding],
            closed: list[Finding]) -> None:
        """Take the next settled event; ``counted`` from :meth:`company`."""
        g = self.group
        if self.settings.counts(self.rule, event):
            end = self.latest_end_ns
            self.latest_end_ns = event.offset_ns if end is None else max(end, event.offset_ns)
        if self._tied and self._tied[0].onset_ns != event.onset_ns:
            self._tied = []
        if not counted:
            if g is not None:
                g.events.append(event)  # in the span if a counted event follows; cut at close
            self._tied.append(event)  # in the span of a group opening at the same onset
            return
        if g is not None and event.onset_ns - g.end_ns < self.gap_ns:
            g.end_ns = max(g.end_ns, event.offset_ns)
            g.counted += 1
            g.events.append(event)
        else:
            self.close(coverage, closed)
            g = self.group = _Group(event.onset_ns, event.offset_ns, 1, [*self._tied, event])
        if not g.raised and g.end_ns - g.start_ns > self.limit_ns:
            g.raised = True
            out.append(self.finding(g, ONGOING, coverage))

    def expire(self, frontier_ns: int, coverage: Coverage, closed: list[Finding]) -> None:
        if self.group is not None and frontier_ns >= self.group.end_ns + self.gap_ns:
            self.close(coverage, closed)

    def close(self, coverage: Coverage, closed: list[Finding]) -> None:
        g, self.group = self.group, None
        if g is not None and g.raised:
            closed.append(self.finding(g, COMPLETED, coverage))

    def finding(self, g: _Group, status: str, coverage: Coverage) -> Finding:
        after = coverage.gaps(g.end_ns, g.end_ns + self.gap_ns) if status == COMPLETED else []
        return Finding(
            device_id=self.device_id, rule=self.rule, status=status, start_ns=g.start_ns,
            end_ns=g.end_ns, settings=self.settings,
            events=tuple(e for e in g.events if e.onset_ns <= g.end_ns),
            coverage_gaps=tuple(coverage.gaps(g.start_ns, g.end_ns)),
            uncovered_after_end_ns=sum(b - a for a, b in after),
        )

    def provisional(self, pending: Sequence[RuleEvent], now_ns: int) -> tuple[int, int, int]:
        """(start, end, counted) of the group open at ``now_ns`` counting pending events;
        (0, 0, 0) when none."""
        g = self.group
        span = (g.start_ns, g.end_ns, g.counted) if g is not None else None
        for i, e in enumerate(pending):
            if not self.company(pending, i, None):
                continue
            if span is not None and e.onset_ns - span[1] < self.gap_ns:
                span = (span[0], max(span[1], e.offset_ns), span[2] + 1)
            else:
                span = (e.onset_ns, e.offset_ns, 1)
        if span is None or now_ns - span[1] >= self.gap_ns:
            return (0, 0, 0)
        return span


@dataclass(frozen=True)
class Progress:
    """Per-device live progress at ``time_ns``: lengths of the open episode and stretch
    (0 when none), provisional (they include events still inside the reorder window)."""

    device_id: str
    time_ns: int
    episode_s: float
    episode_start_ns: int | None
    episode_events: int
    stretch_s: float
    stretch_start_ns: int | None
    stretch_events: int
    continuous_limit_s: float
    intermittent_limit_s: float
    late_events: int


class RuleEngine:
    """Both rules for one device, fed in any order within ``reorder_window_s``.

    Contract: :meth:`add_event` and :meth:`observe_coverage` as data arrives, then
    :meth:`advance` with ``now_ns``, a capture-time frontier (live: the end of the latest
    frame processed; never wall-clock arrival time). Every event whose onset is before
    ``now_ns - reorder_window_s`` must have been added by then; such events are settled in
    capture order, and an episode or stretch ends once no settled event can extend it.
    A later event older than the settled frontier is late: counted, logged and dropped.
    Exact duplicates are dropped silently. :meth:`flush` ends everything (end of data).
    """

    def __init__(self, device_id: str, settings: RuleSettings | None = None) -> None:
        self.device_id = device_id
        self.settings = settings or RuleSettings()
        self.coverage = Coverage()
        self.late_events = 0
        self.duplicates = 0
        self._trackers = [_Tracker(device_id, rule, self.settings) for rule in RULES]
        self._pending: dict[tuple[int, int, str], RuleEvent] = {}
        self._settled_keys: dict[tuple[int, int, str], None] = {}
        self._window_ns = round(self.settings.reorder_window_s * NS)
        self._frontier_ns: int | None = None  # every onset before it is settled

    def add_event(self, event: RuleEvent) -> None:
        """Take one event (any order within the reorder window; duplicates are harmless)."""
        if event.device_id != self.device_id:
            raise RuleInputError(f"event of device {event.device_id!r} given to the rule "
                                 f"engine of {self.device_id!r}")
        if event.key in self._pending or event.key in self._settled_keys:
            self.duplicates += 1
            return
        if self._frontier_ns is not None and event.onset_ns < self._frontier_ns:
            self.late_events += 1
            log.warning("late dog event of %s at %d ns (settled up to %d ns): not counted",
                        self.device_id, event.onset_ns, self._frontier_ns)
            return
        self._pending[event.key] = event

    def observe_coverage(self, start_ns: int, end_ns: int) -> None:
        """Frames were measured over [start_ns, end_ns) (live: once per frame)."""
        self.coverage.add(start_ns, end_ns)

    def advance(self, now_ns: int) -> list[Finding]:
        """Settle events before ``now_ns - reorder_window_s``; return findings raised
        (ongoing) and completed since the last call, completed ones in evidence-chain order."""
        frontier = now_ns - self._window_ns
        if self._frontier_ns is not None and frontier <= self._frontier_ns:
            return []
        self._frontier_ns = frontier
        return self._settle(frontier)

    def flush(self) -> list[Finding]:
        """End of data: settle every event and complete everything still open."""
        found = self._settle(None)
        closed: list[Finding] = []
        for tracker in self._trackers:
            tracker.close(self.coverage, closed)
        return found + sorted(closed, key=_chain_key)

    def progress(self, now_ns: int) -> Progress:
        """The open episode's and stretch's lengths at ``now_ns`` (see :class:`Progress`)."""
        pending = sorted(self._pending.values(), key=lambda e: e.key)
        spans = [t.provisional(pending, now_ns) for t in self._trackers]
        (e0, e1, en), (s0, s1, sn) = spans
        return Progress(
            device_id=self.device_id, time_ns=now_ns, episode_s=(e1 - e0) / NS,
            episode_start_ns=e0 if en else None, episode_events=en,
            stretch_s=(s1 - s0) / NS, stretch_start_ns=s0 if sn else None, stretch_events=sn,
            continuous_limit_s=self.settings.continuous_limit_s,
            intermittent_limit_s=self.settings.intermittent_limit_s,
            late_events=self.late_events,
        )

    def _settle(self, frontier: int | None) -> list[Finding]:
        """Settle pending events in capture order up to ``frontier`` (None: all of them).
        An event whose counting waits on company that may still arrive stops the settling
        there (it and the events after it stay pending): the trackers see one order only."""
        pending = sorted(self._pending.values(), key=lambda e: e.key)
        raised: list[Finding] = []
        closed: list[Finding] = []
        settled_to = frontier
        for i, event in enumerate(pending):
            if frontier is not None and event.onset_ns >= frontier:
                break
            decided = [t.company(pending, i, frontier) for t in self._trackers]
            if None in decided:
                settled_to = event.onset_ns
                break
            del self._pending[event.key]
            self._settled_keys[event.key] = None
            for tracker, counted in zip(self._trackers, decided, strict=True):
                tracker.add(event, bool(counted), self.coverage, raised, closed)
        if settled_to is not None:
            for tracker in self._trackers:
                tracker.expire(settled_to, self.coverage, closed)
            self._forget(settled_to)
        return raised + sorted(closed, key=_chain_key)

    def _forget(self, frontier: int) -> None:
        horizon = frontier - self._window_ns
        for key in [k for k in self._settled_keys if k[0] < horizon]:
            del self._settled_keys[key]
        starts = [t.group.start_ns for t in self._trackers if t.group is not None]
        self.coverage.forget_before(min([*starts, frontier - max(
            t.gap_ns for t in self._trackers)]))


def counted_events(rule: str, settings: RuleSettings,
                   events: Iterable[RuleEvent]) -> list[RuleEvent]:
    """The events of ``events`` that count towards ``rule``, in capture order: those its
    reading counts (:meth:`RuleSettings.counts`) and, where the rule needs company
    (:meth:`RuleSettings.company_ns`), with another such event starting less than that time
    after its end or ending less than that time before its start (overlap included), or
    lasting that long itself. What :class:`RuleEngine` decides event by event, over a batch."""
    base = sorted((e for e in events if settings.counts(rule, e)), key=lambda e: e.key)
    w = settings.company_ns(rule)
    if not w:
        return base
    kept: list[RuleEvent] = []
    latest_end: int | None = None
    for i, event in enumerate(base):
        if _in_company(event, latest_end, base[i + 1].onset_ns if i + 1 < len(base) else None,
                       w):
            kept.append(event)
        latest_end = event.offset_ns if latest_end is None else max(latest_end, event.offset_ns)
    return kept


def _in_company(event: RuleEvent, latest_end_ns: int | None, next_onset_ns: int | None,
                company_ns: int) -> bool:
    """Whether a counted ``event`` has company: no company needed (0), or it lasts that long
    itself, or the latest end of the counted events before it, or the onset of the next
    counted one after it, lies less than that from it."""
    w = company_ns
    return (not w or event.offset_ns - event.onset_ns >= w
            or (latest_end_ns is not None and event.onset_ns - latest_end_ns < w)
            or (next_onset_ns is not None and next_onset_ns - event.offset_ns < w))


def _chain_key(finding: Finding) -> tuple[int, str, int]:
    return (finding.close_ns, finding.rule, finding.start_ns)


def chain_order(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in evidence-chain order: by ``close_ns``, then rule, then start."""
    return sorted(findings, key=_chain_key)


def evaluate(device_id: str, events: Iterable[RuleEvent], coverage: Iterable[tuple[int, int]],
             settings: RuleSettings | None = None) -> list[Finding]:
    """Completed findings, in chain order, of a whole batch of events (offline analysis,
    recomputation); ``coverage`` the measured [start_ns, end_ns) intervals."""
    engine = RuleEngine(device_id, settings)
    for start, end in coverage:
        engine.observe_coverage(start, end)
    for event in events:
        engine.add_event(event)
    return [f for f in engine.flush() if f.status == COMPLETED]
