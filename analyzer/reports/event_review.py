"""The report's section on the officer's review of the events (issue 35, item 2): every
verdict recorded on each linked finding's events (confirmed, or rejected with a reason; a
replaced verdict is listed with what replaced it) and the finding judged again without the
rejected events, beside the finding as sealed."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from analyzer.cases import EvidenceLink, format_time
from analyzer.reports.gather import ReportData

NS = 1_000_000_000


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "not available"
    return f"{seconds:.1f} s ({seconds / 60:.1f} min)"


Escape = Callable[[object], str]
Table = Callable[[Sequence[str], Iterable[Sequence[str]]], str]


def window_heading(section: int, number: int, link: EvidenceLink, _e: Escape) -> str:
    """The heading of a linked window's part of report section ``section`` (3 and 9)."""
    return (f"<h3>{section}.{number} {_e(link.rule)} finding on {_e(link.device_id)}, "
            f"{_e(format_time(link.start_ns))}</h3>")


def verdicts_section(data: ReportData, redact: Callable[[str], str], _e: Escape,
                     _table: Table) -> str:
    """Section 9: per linked window, the verdicts on its events and the re-judged finding, as
    HTML; ``redact`` withholds the complainant's identity from the reasons, ``_e`` and
    ``_table`` are the report's escaping and tables (analyzer.reports.html)."""
    parts = ["<h2>9. The officer's review of the events</h2><p>Each event of a finding is a "
             "candidate for a person to check. An officer confirms it or rejects it with a "
             "reason (<code>barkwatch case verdict</code> or the review application's finding "
             "page); a later verdict on an event replaces the earlier one, and both are kept. "
             "The finding is then judged again by the same rule, with its own parameters and "
             "coverage, over its events less the rejected ones.</p>"]
    if not data.windows:
        parts.append("<p>No evidence window is linked to this complaint.</p>")
    for number, evidence in enumerate(data.windows, 1):
        link = evidence.check.link
        parts.append(window_heading(9, number, link, _e))
        review = data.reviews.get(link.id)
        if review is None:
            parts.append("<p class='bad'>The verdicts on this finding's events could not be "
                         "read.</p>")
            continue
        replaced_by = {v.supersedes: v.id for v in review.history if v.supersedes}
        reviewed = len(review.confirmed) + len(review.rejected)
        parts.append(f"<p>{len(review.events)} events in the span: "
                     f"{len(review.confirmed)} confirmed, {len(review.rejected)} rejected, "
                     f"{len(review.events) - reviewed} not reviewed by an officer.</p>")
        if review.history:
            rows = [(str(v.id), _e(f"{format_time(v.onset_ns)} {v.label}"),
                     "<span class='ok'>confirmed</span>" if v.verdict == "confirmed"
                     else "<span class='bad'>rejected</span>", _e(redact(v.reason)) or "",
                     _e(v.officer), _e(format_time(v.at_ns)),
                     f"replaced by #{replaced_by[v.id]}" if v.id in replaced_by else "in force")
                    for v in review.history]
            parts.append(_table(["#", "Event (onset)", "Verdict", "Reason", "Officer",
                                 "Recorded", "State"], rows))
        else:
            parts.append("<p>No verdict has been recorded on these events.</p>")
        again = review.rejudged
        if again is None:
            parts.append("<p class='bad'>The stored window could not be read, so the finding "
                         "is not judged again.</p>")
            continue
        rejected = len(review.rejected)
        parts.append(_table(["Reading", "Rule met", "Longest episode or stretch",
                             "Events counted"], [
            ("As sealed", "<span class='ok'>met</span>",
             _e(_duration(review.stored.get("duration_s"))),
             _e(review.stored.get("events_counted", ""))),
            (_e(f"Without the {rejected} rejected event{'' if rejected == 1 else 's'}"),
             "<span class='ok'>still met</span>" if again.holds
             else "<span class='bad'>not met</span>",
             _e(_duration(again.longest_s) + (
                 f", {format_time(again.start_ns)} to {format_time(again.end_ns)}"
                 if again.start_ns is not None and again.end_ns is not None else "")
                + (f"; {again.parts_holding} parts each over the limit"
                   if again.parts_holding > 1 else "")),
             _e(again.events_counted))]))
        parts.append(f"<p>The rule's limit: more than {again.limit_s:.0f} s.</p>")
    return "".join(parts)
