"""Whose dog in the report and the review page (issue 36, item 4): the rule over the premises'
sector's events beside the count over all events, and the polar plot of the counted events'
bearings against the sector (analyzer/reports/bearings.py)."""

from __future__ import annotations

from html import unescape

from analyzer.acoustics.attribution import ELSEWHERE, NO_BEARING, PREMISES
from analyzer.cases.links import LinkCheck
from analyzer.cases.records import EvidenceLink
from analyzer.ordinance import RuleEvent
from analyzer.reports import WindowEvidence, element_rows
from analyzer.reports.bearings import bearings_plot, event_marks, premises_summary

NS = 1_000_000_000
T0 = 1_780_000_000 * NS
LINK = EvidenceLink(1, 1, "dev-9", "continuous", T0, T0 + 480 * NS, "0" * 64, T0, "Ofc.")
FROM_PREMISES = {
    "sector": {"bearing_deg": "90.000000", "half_width_deg": "20.000000"},
    "origins": {PREMISES: 13, ELSEWHERE: 11, NO_BEARING: 1}, "events_counted": 13,
    "start_ns": T0, "end_ns": T0 + 241 * NS, "longest_s": "241.000000", "holds": False}


def bark(t_s: int, bearing: float | None, origin: str) -> RuleEvent:
    return RuleEvent("dev-9", T0 + t_s * NS, T0 + t_s * NS + NS, "bark", 0.9, 70.0, 80.0, "m",
                     plainly_audible=True, bearing_deg=bearing,
                     bearing_uncertainty_deg=None if bearing is None else 4.0, origin=origin)


def evidence(events: list[RuleEvent], from_premises: dict[str, object] | None
             ) -> WindowEvidence:
    fields: dict[str, object] = {"parameters": {"continuous_limit_s": "420.000000"}}
    if from_premises is not None:
        fields["from_premises"] = from_premises
    return WindowEvidence(LinkCheck(LINK, "verified", [], fields), events)


def test_the_row_says_the_rule_does_not_hold_over_the_sectors_events_alone() -> None:
    text = premises_summary({"from_premises": FROM_PREMISES}, "continuous")
    assert text.startswith("over the events from the sector 90° ± 20° alone the continuous "
                           "rule does not hold: longest 241.0 s (4.0 min); of the counted "
                           "events 13 from the sector, 11 from elsewhere, 1 with no bearing.")


def test_the_row_says_when_no_sector_is_entered_or_the_window_predates_attribution() -> None:
    assert premises_summary({}, "continuous").startswith("not judged: the window was sealed "
                                                          "before events were attributed")
    unentered = {**FROM_PREMISES, "sector": None}
    assert premises_summary({"from_premises": unentered}, "continuous").startswith(
        "the premises' sector is not entered in the installation record")


def test_each_counted_event_with_a_bearing_is_marked_from_the_centre_at_the_start() -> None:
    marks, without = event_marks(evidence(
        [bark(0, 92.0, PREMISES), bark(240, 135.0, ELSEWHERE), bark(480, None, NO_BEARING)],
        FROM_PREMISES))
    assert marks == [(PREMISES, 92.0, 4.0, 0.1), (ELSEWHERE, 135.0, 4.0, 0.55)]
    assert without == 1


def test_no_plot_without_a_sector_or_a_bearing() -> None:
    assert bearings_plot(evidence([bark(0, None, NO_BEARING)], None)) is None


def test_the_report_shows_both_counts_and_the_polar_plot() -> None:
    window = evidence([bark(0, 92.0, PREMISES), bark(240, 135.0, ELSEWHERE)], FROM_PREMISES)
    rows = dict(element_rows(window))
    assert unescape(rows["From the premises' sector (whose dog)"]).startswith(
        "over the events from the sector 90° ± 20° alone the continuous rule does not hold")
    title, caption, uri = bearings_plot(window) or ("", "", "")
    assert title == "Bearings of the counted events against the premises' sector"
    assert uri.startswith("data:image/png;base64,")
    assert "(90° ± 20°). Each of the 2 mark(s)" in caption
    assert "0 counted event(s) had no bearing" in caption

