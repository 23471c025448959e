"""A finding judged again without the events an officer rejected (issue 35, event review).

A judge will ask whether the finding holds without the events the officer could not confirm.
:func:`without_rejected` re-runs the rule (:func:`analyzer.ordinance.rules.evaluate`) over the
finding's events minus the rejected ones, with the finding's own parameters and coverage, and
says whether the rule is still met, by how long the longest remaining episode or stretch
lasts and how many events it counts. Pure: no clock, no I/O.

Leaving events out can only shorten or split the group (never merge it with a neighbour), so
only the finding's own events (onset in its span) need to be judged again.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from analyzer.ordinance.evidence import group_spans
from analyzer.ordinance.rules import NS, RuleEvent, RuleSettings, counted_events, evaluate

EventKey = tuple[int, str]  # (onset_ns, label): a dog_event point's identity on its device


def event_key(event: RuleEvent) -> EventKey:
    """The identity a verdict names an event by: its onset and label (the ``dog_event``
    point's time and tag; the device is the finding's)."""
    return (event.onset_ns, event.label)


@dataclass(frozen=True)
class Rejudged:
    """The rule judged again without ``rejected`` events.

    ``start_ns``/``end_ns`` bound the longest remaining group of counted events (None when
    no counted event is left); ``holds`` when it still lasts more than the rule's limit;
    ``parts_holding`` counts the groups that do (a rejected stretch in the middle can leave
    two); ``uncovered_s`` the coverage gaps inside the longest group when it holds."""

    rule: str
    rejected: int
    holds: bool
    longest_s: float
    events_counted: int
    parts_holding: int
    limit_s: float
    start_ns: int | None = None
    end_ns: int | None = None
    uncovered_s: float = 0.0


def without_rejected(device_id: str, rule: str, settings: RuleSettings,
                     events: Sequence[RuleEvent], coverage: Sequence[tuple[int, int]],
                     rejected: Collection[EventKey]) -> Rejudged:
    """``rule`` over ``events`` (the finding's) less those whose :func:`event_key` is in
    ``rejected``, with ``settings`` (the finding's parameters) and ``coverage`` (measured
    [start_ns, end_ns) intervals around it)."""
    kept = [e for e in events if event_key(e) not in rejected]
    left_out = len(events) - len(kept)
    limit_s = settings.limit_ns(rule) / NS
    found = [f for f in evaluate(device_id, kept, coverage, settings) if f.rule == rule]
    if found:
        longest = max(found, key=lambda f: (f.end_ns - f.start_ns, -f.start_ns))
        return Rejudged(rule, left_out, True, longest.duration_s, len(longest.counted),
                        len(found), limit_s, longest.start_ns, longest.end_ns,
                        sum(b - a for a, b in longest.coverage_gaps) / NS)
    spans = group_spans(counted_events(rule, settings, kept), settings.gap_ns(rule))
    if not spans:
        return Rejudged(rule, left_out, False, 0.0, 0, 0, limit_s)
    start, end, count = max(spans, key=lambda s: (s[1] - s[0], -s[0]))
    return Rejudged(rule, left_out, False, (end - start) / NS, count, 0, limit_s, start, end)
