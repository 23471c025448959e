"""The rule counted a second time, over the events from the premises' sector (issue 36).

A finding is counted over all events: the upper bound, since a sensor at the complainant's
address may hear several yards. Its evidence window also says whether the same rule holds
over the counted events attributed to the premises' sector alone: the lower bound (an event
counts as from the premises only when its whole bearing interval lies inside the sector;
:mod:`analyzer.acoustics.attribution`). The officer and the court see both.

Why inside the finding's window and not a finding of its own: the premises' events are a
subset of all events, so every group they form with the rule's gap lies inside one group of
all events (removing events can only widen gaps), and a counted event outside the finding's
span is at least the rule's gap away from it. The premises' groups inside a finding are so
exactly the groups the rule forms over the premises' events alone (``barkwatch analyze``'s
``findings_from_premises``, which seal their own chain offline), and they are computed from
the finding's own events: the window keeps one digest chain, and ``findings recompute``
re-derives them from the stored events' origins. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from analyzer.acoustics.attribution import ORIGINS, PREMISES, PremisesSector
from analyzer.ordinance.rules import NS, Finding, counted_events


def premises_count(finding: Finding, sector: PremisesSector | None) -> dict[str, Any]:
    """The window's ``from_premises``: the sector judged against (None when not entered),
    the origins of the counted events, and the longest group the premises' events form with
    the rule's gap, counted as the rule counts them over the premises' events alone
    (``start_ns``/``end_ns`` None and ``longest_s`` 0 when none); ``holds`` when it lasts
    more than the rule's limit."""
    counted = finding.counted
    origins = dict.fromkeys(ORIGINS, 0)
    for event in counted:
        origins[event.origin] = origins.get(event.origin, 0) + 1
    gap_ns = finding.settings.gap_ns(finding.rule)
    # the rule over the premises' events alone: an intermittent event's company must be from
    # the premises too (issue 39), so one whose only company came from elsewhere drops out
    mine = counted_events(finding.rule, finding.settings,
                          [e for e in finding.events if e.origin == PREMISES])
    groups: list[tuple[int, int]] = []  # the gap as the rules measure it: latest end so far
    for event in mine:
        if groups and event.onset_ns - groups[-1][1] < gap_ns:
            groups[-1] = (groups[-1][0], max(groups[-1][1], event.offset_ns))
        else:
            groups.append((event.onset_ns, event.offset_ns))
    longest = max(groups, key=lambda g: g[1] - g[0], default=None)
    length_ns = 0 if longest is None else longest[1] - longest[0]
    return {
        "sector": None if sector is None or not sector.entered else {
            "bearing_deg": sector.bearing_deg, "half_width_deg": sector.half_width_deg},
        "origins": origins,
        "events_counted": len(mine),
        "start_ns": None if longest is None else longest[0],
        "end_ns": None if longest is None else longest[1],
        "longest_s": length_ns / NS,
        "holds": length_ns > finding.settings.limit_ns(finding.rule),
    }
