"""The officer's verdict on each event of a linked finding (issue 35; schema migration 6).

The README calls events "candidates for a person to check": an officer confirms an event or
rejects it with a reason (a bird, a door, a neighbour's dog ...). A verdict names the event by
the evidence link and the event's onset and label (the ``dog_event`` point's time and tag on
the link's device); the event itself stays in InfluxDB, never copied or changed. Verdicts are
only added: a later verdict on the same event supersedes the one before and names it, and
the history keeps both. Each verdict and its audit entry are written in one transaction.

:func:`review_events` reads a finding's events with their current verdicts and the finding
judged again without the rejected ones (:func:`analyzer.ordinance.rejudge.without_rejected`)
for the review application's finding page, ``barkwatch case events`` and the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from analyzer.cases.links import LinkCheck
from analyzer.cases.localtime import format_time
from analyzer.cases.records import EvidenceLink
from analyzer.cases.store import CaseError, CaseStore, _note, _text
from analyzer.errors import AnalyzerError
from analyzer.ordinance import RuleEvent
from analyzer.ordinance.rejudge import EventKey, Rejudged, without_rejected
from analyzer.store import InfluxClient, load_coverage, load_events, load_windows
from analyzer.store.evidence_store import settings_from_parameters

CONFIRMED, REJECTED = "confirmed", "rejected"
VERDICTS = (CONFIRMED, REJECTED)
NS = 1_000_000_000
FRAME_NS = NS  # one scored level point covers one second (analyzer.store.load_coverage)


@dataclass(frozen=True)
class EventVerdict:
    """One verdict on one event of a linked finding; ``supersedes`` the verdict it replaced."""

    id: int
    link_id: int
    complaint_id: int
    onset_ns: int
    offset_ns: int
    label: str
    verdict: str
    reason: str
    officer: str
    at_ns: int
    supersedes: int | None

    @property
    def key(self) -> EventKey:
        """The event it is about: (onset_ns, label)."""
        return (self.onset_ns, self.label)


_SELECT = ("SELECT id, link_id, complaint_id, onset_ns, offset_ns, label, verdict, reason, "
           "officer, at_ns, supersedes FROM event_verdicts")


def _link(store: CaseStore, link_id: int) -> EvidenceLink:
    rows = store.db.execute("SELECT id, complaint_id, device_id, rule, start_ns, end_ns, "
                            "digest, linked_ns, officer FROM evidence_links WHERE id = ?",
                            (link_id,)).fetchall()
    if not rows:
        raise CaseError(f"no evidence link {link_id}")
    return EvidenceLink(*rows[0])


def add_event_verdict(store: CaseStore, link_id: int, onset_ns: int, offset_ns: int,
                      label: str, verdict: str, reason: str, officer: str) -> int:
    """Record ``verdict`` (confirmed, or rejected with a ``reason``) on the event of link
    ``link_id`` at ``onset_ns`` with ``label``; a verdict already on that event is superseded
    (named in the new one's ``supersedes``; both kept). Returns the new verdict's id.

    The caller has found the event among the finding's (:func:`judge_event`); this checks
    that the onset lies in the link's span."""
    link = _link(store, link_id)
    if verdict not in VERDICTS:
        raise CaseError(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    reason = _note(reason, "the reason")
    if verdict == REJECTED and not reason:
        raise CaseError("a rejected event needs a reason: say why it is not a dog's noise or "
                        "not this dog's")
    if not link.start_ns <= onset_ns <= link.end_ns:
        raise CaseError(f"no event of this finding starts at {format_time(onset_ns)}: the "
                        f"finding spans {format_time(link.start_ns)} to "
                        f"{format_time(link.end_ns)}")
    if offset_ns < onset_ns:
        raise CaseError("the event ends before it starts")
    actor = _text(officer, "officer")
    label = _text(label, "label")
    with store._transaction() as db:
        before = db.execute("SELECT max(id) FROM event_verdicts WHERE link_id = ? AND "
                            "onset_ns = ? AND label = ?", (link_id, onset_ns, label)).fetchone()
        values: dict[str, Any] = {
            "link_id": link_id, "complaint_id": link.complaint_id, "onset_ns": onset_ns,
            "offset_ns": offset_ns, "label": label, "verdict": verdict, "reason": reason,
            "officer": actor, "at_ns": store.file.clock(), "supersedes": before[0]}
        columns = ", ".join(values)
        cursor = db.execute(f"INSERT INTO event_verdicts ({columns}) VALUES "
                            f"({', '.join('?' for _ in values)})", tuple(values.values()))
        verdict_id = int(cursor.lastrowid or 0)
        store._audit(actor, f"{verdict} event" if before[0] is None
                     else f"{verdict} event (supersedes verdict {before[0]})",
                     "event_verdicts", verdict_id, values)
    return verdict_id


def event_verdicts(store: CaseStore, link_id: int) -> list[EventVerdict]:
    """Every verdict on the link's events, superseded ones too, in the order recorded."""
    return [EventVerdict(*row) for row in store.db.execute(
        _SELECT + " WHERE link_id = ? ORDER BY id", (link_id,)).fetchall()]


def current_verdicts(store: CaseStore, link_id: int) -> dict[EventKey, EventVerdict]:
    """The verdict in force on each event of the link (the latest on it)."""
    return {v.key: v for v in event_verdicts(store, link_id)}


def find_event(events: Sequence[RuleEvent], onset_ns: int,
               label: str | None = None) -> RuleEvent:
    """The finding's event at ``onset_ns`` (with ``label`` when given); CaseError when there
    is none or, without a label, more than one."""
    found = [e for e in events if e.onset_ns == onset_ns and label in (None, e.label)]
    if not found:
        raise CaseError(f"the finding has no event at {format_time(onset_ns)} "
                        f"({onset_ns} ns since 1970)" + (f" labelled {label!r}" if label else ""))
    if len(found) > 1:
        raise CaseError(f"{len(found)} events start at {format_time(onset_ns)}: name one by "
                        f"its label ({', '.join(sorted(e.label for e in found))})")
    return found[0]


def finding_events(client: InfluxClient, link: EvidenceLink) -> list[RuleEvent]:
    """The stored events of the linked finding: onset in its span, counted or not (as the
    sealed window's ``events_sha256`` covers them)."""
    return load_events(client, link.device_id, link.start_ns, link.end_ns)


def judge_event(store: CaseStore, link: EvidenceLink, events: Sequence[RuleEvent],
                onset_ns: int, verdict: str, reason: str, officer: str,
                label: str | None = None) -> int:
    """Record a verdict on the finding's event at ``onset_ns`` (one of ``events``, read by
    :func:`finding_events`): what the review application and ``barkwatch case verdict`` do."""
    event = find_event(events, onset_ns, label)
    return add_event_verdict(store, link.id, event.onset_ns, event.offset_ns, event.label,
                             verdict, reason, officer)


@dataclass(frozen=True)
class EventReview:
    """A linked finding's events, the verdicts on them and the finding judged again without
    the rejected ones (None when the stored window's parameters could not be read)."""

    link: EvidenceLink
    events: list[RuleEvent]
    verdicts: dict[EventKey, EventVerdict]
    history: list[EventVerdict]
    rejudged: Rejudged | None
    stored: dict[str, Any] = field(default_factory=dict)  # the window's duration and count

    @property
    def rejected(self) -> list[EventVerdict]:
        """Verdicts in force that reject an event, in time order."""
        return sorted((v for v in self.verdicts.values() if v.verdict == REJECTED),
                      key=lambda v: v.key)

    @property
    def confirmed(self) -> list[EventVerdict]:
        """Verdicts in force that confirm an event, in time order."""
        return sorted((v for v in self.verdicts.values() if v.verdict == CONFIRMED),
                      key=lambda v: v.key)


def stored_fields(client: InfluxClient, link: EvidenceLink) -> dict[str, Any] | None:
    """The linked window's stored content (its parameters, duration, sensitivity), or None
    when no window of the link's device, rule and start is stored."""
    for stored in load_windows(client, link.device_id, link.start_ns, link.start_ns):
        if stored.window.rule == link.rule:
            return stored.window.fields
    return None


def rejudge(client: InfluxClient, link: EvidenceLink, fields: dict[str, Any],
            events: Sequence[RuleEvent], rejected: set[EventKey]) -> Rejudged:
    """The linked finding judged again without ``rejected`` events: its rule, its stored
    parameters and the coverage stored around it (as ``barkwatch findings recompute``)."""
    settings = settings_from_parameters(fields.get("parameters", {}))
    gap_ns = settings.gap_ns(link.rule)
    coverage = load_coverage(client, link.device_id, link.start_ns - gap_ns - FRAME_NS,
                             link.end_ns + 2 * gap_ns)
    return without_rejected(link.device_id, link.rule, settings, events, coverage, rejected)


def review_events(store: CaseStore, client: InfluxClient, link: EvidenceLink,
                  fields: dict[str, Any] | None,
                  events: Sequence[RuleEvent] | None = None) -> EventReview:
    """The link's events (read now unless given), the verdicts on them and the re-judged
    finding; verdicts on events no longer stored stay in ``history``."""
    events = list(finding_events(client, link) if events is None else events)
    history = event_verdicts(store, link.id)
    verdicts = {v.key: v for v in history}
    rejudged = None
    if fields and fields.get("parameters"):
        rejected = {k for k, v in verdicts.items() if v.verdict == REJECTED}
        rejudged = rejudge(client, link, fields, events, rejected)
    stored = {} if not fields else {"duration_s": float(fields.get("duration_s", 0.0)),
                                    "events_counted": int(fields.get("events_counted", 0))}
    return EventReview(link, events, verdicts, history, rejudged, stored)


def review_links(store: CaseStore, client: InfluxClient,
                 reads: Sequence[tuple[LinkCheck, Sequence[RuleEvent]]]
                 ) -> dict[int, EventReview]:
    """:func:`review_events` of each linked window (its check and the events read around it,
    those outside its span left out), by link id; a window whose review cannot be read now
    (InfluxDB trouble) is left out, and the report says so."""
    reviews: dict[int, EventReview] = {}
    for check, read in reads:
        link = check.link
        in_span = [e for e in read if link.start_ns <= e.onset_ns <= link.end_ns]
        try:
            reviews[link.id] = review_events(store, client, link, check.fields, in_span)
        except AnalyzerError:
            continue
    return reviews
