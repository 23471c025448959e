"""Event review on the finding page (issue 35, item 2): what the page shows of the finding's
events (a table with each one's verdict and the form to set it), the finding judged again
without the rejected events as one more row of its sensitivity, and every verdict recorded.
The form's handler is :mod:`verdicts`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analyzer.cases import EvidenceLink, LinkCheck, format_time
from analyzer.cases.store import MAX_NOTE_CHARS
from analyzer.cases.verdicts import (
    VERDICTS,
    EventReview,
    EventVerdict,
    review_events,
)
from analyzer.errors import AnalyzerError
from analyzer.ordinance import RuleEvent, RuleSettings, counted_events
from analyzer.ordinance.rejudge import event_key
from analyzer.review.context import Review
from analyzer.store.evidence_store import settings_from_parameters

NS = 1_000_000_000


def bearing_deg(event: RuleEvent) -> float | None:
    """The event's bearing from the sensor, degrees (issue 35: "bearing once the sensor has
    one"; issue 36: read from the ``dog_event`` point), None when it has none; the page's
    bearing column appears when some event has one."""
    value = getattr(event, "bearing_deg", None)
    return None if value is None else float(value)


@dataclass(frozen=True)
class EventRow:
    """One line of the events table."""

    number: int
    event: RuleEvent
    anchor: str
    duration_s: float
    audible: str  # yes / no / not assessed
    counted: bool | None  # counts towards the rule (None: the parameters are not readable)
    bearing_deg: float | None
    verdict: EventVerdict | None


def _audible(event: RuleEvent) -> str:
    if event.plainly_audible is None:
        return "not assessed"
    return "yes" if event.plainly_audible else "no"


def _settings(fields: dict[str, Any] | None) -> RuleSettings | None:
    try:
        return settings_from_parameters((fields or {}).get("parameters", {}))
    except (AnalyzerError, ValueError):
        return None


def _sensitivity(review: EventReview, fields: dict[str, Any]) -> list[dict[str, Any]]:
    """The sensitivity rows: the finding as sealed, the stored gap alternatives, and the
    finding judged again without the rejected events (``id`` 'rejudged')."""
    parameters = fields.get("parameters", {})
    gap_name = "continuity_gap_s" if review.link.rule == "continuous" else "intermittency_gap_s"
    rows: list[dict[str, Any]] = [{
        "id": "as-sealed", "what": f"As sealed (gap under {float(parameters[gap_name]):g} s)"
        if gap_name in parameters else "As sealed", "holds": True,
        "longest_s": review.stored.get("duration_s"),
        "events": review.stored.get("events_counted")}]
    for r in fields.get("sensitivity", []):
        rows.append({"id": f"gap-{float(r['gap_s']):g}",
                     "what": f"Gap under {float(r['gap_s']):g} s", "holds": bool(r["holds"]),
                     "longest_s": float(r["longest_s"]), "events": None})
    again = review.rejudged
    if again is not None:
        rejected = len(review.rejected)
        span = (f"{format_time(again.start_ns)} to {format_time(again.end_ns)}"
                if again.start_ns is not None and again.end_ns is not None else "")
        rows.append({
            "id": "rejudged", "what": f"Without the {rejected} rejected event"
            f"{'' if rejected == 1 else 's'}" + (f" ({again.rejected} in the span)"
                                                 if again.rejected != rejected else ""),
            "holds": again.holds, "longest_s": again.longest_s,
            "events": again.events_counted, "span": span,
            "parts": again.parts_holding, "uncovered_s": again.uncovered_s})
    return rows


def events_context(review: Review, link: EvidenceLink, check: LinkCheck,
                   events: list[RuleEvent], refused: dict[str, Any] | None) -> dict[str, Any]:
    """What finding.html shows of the events: the table, the verdict forms (and a refused one
    again), the sensitivity with the re-judged row, and every verdict ever recorded."""
    with review.case_file() as store:
        found = review_events(store, review.client, link, check.fields, events)
    settings = _settings(check.fields)
    counted = (None if settings is None
               else {e.key for e in counted_events(link.rule, settings, events)})
    rows = [EventRow(number, e, f"event-{e.onset_ns}-{e.label}", (e.offset_ns - e.onset_ns) / NS,
                     _audible(e), None if counted is None else e.key in counted,
                     bearing_deg(e), found.verdicts.get(event_key(e)))
            for number, e in enumerate(sorted(events, key=lambda ev: ev.key), 1)]
    return {
        "event_rows": rows, "verdicts": VERDICTS, "verdict_history": found.history,
        "show_bearing": any(r.bearing_deg is not None for r in rows),
        "rejected_count": len(found.rejected), "confirmed_count": len(found.confirmed),
        "sensitivity_rows": _sensitivity(found, check.fields) if check.fields else [],
        "max_note_chars": MAX_NOTE_CHARS,
        "verdict_refused": refused or {"anchor": "", "message": "", "typed": {}}}
