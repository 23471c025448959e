"""Whose dog, in the report and on the review page (issue 36, item 4): the rule counted over
the premises' sector's events beside the count over all events, and a polar plot of the
counted events' bearings against the sector.

Both read the window's ``from_premises`` (:mod:`analyzer.ordinance.premises`; absent in a
window sealed as schema 1, before attribution) and the stored events' bearings. The plot
follows :mod:`analyzer.reports.plots`: matplotlib (Agg), a PNG ``data:`` URI, readable in grey:
events from the premises filled near-black, from elsewhere hollow, straddling the sector's
edge mid-grey triangles.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib.projections.polar import PolarAxes

from analyzer.acoustics.attribution import ELSEWHERE, NO_BEARING, PREMISES
from analyzer.reports.gather import WindowEvidence
from analyzer.reports.plots import figure_data_uri, plt

BEARING_TITLE = "Bearings of the counted events against the premises' sector"
# (marker, face colour, edge colour, legend) per origin.
ORIGIN_MARKS = {
    PREMISES: ("o", "#111111", "#111111", "from the premises' sector (filled)"),
    ELSEWHERE: ("s", "none", "#111111", "from elsewhere (hollow)"),
    NO_BEARING: ("^", "#999999", "#555555", "straddles the sector's edge (grey)"),
}


def premises_summary(fields: dict[str, Any], rule: str) -> str:
    """The element row's text: whether the rule holds over the sector's events alone, how
    long, and where the counted events came from (plain text, not yet escaped)."""
    premises = fields.get("from_premises")
    if premises is None:
        return ("not judged: the window was sealed before events were attributed to the "
                "premises' sector (schema 1)")
    origins = premises.get("origins", {})
    whence = (f"of the counted events {origins.get(PREMISES, 0)} from the sector, "
              f"{origins.get(ELSEWHERE, 0)} from elsewhere, {origins.get(NO_BEARING, 0)} with "
              "no bearing")
    sector = premises.get("sector")
    if sector is None:
        return (f"the premises' sector is not entered in the installation record: no event "
                f"is attributed ({whence})")
    centre, half = float(sector["bearing_deg"]), float(sector["half_width_deg"])
    longest = float(premises.get("longest_s", 0.0))
    verdict = "holds" if premises.get("holds") else "does not hold"
    return (f"over the events from the sector {centre:.0f}° ± {half:.0f}° alone the {rule} "
            f"rule {verdict}: longest {longest:.1f} s ({longest / 60:.1f} min); {whence}. "
            "The count over all events (above) is the upper bound, over the sector's the "
            "lower: an event counts as from the sector only when its whole bearing interval "
            "lies inside it")


def event_marks(evidence: WindowEvidence) -> tuple[list[tuple[str, float, float, float]], int]:
    """(origin, bearing, uncertainty in degrees, radius) of each counted event with a bearing,
    the radius 0.1 at the finding's start to 1.0 at its end; and how many counted events had
    no bearing (not drawn)."""
    link = evidence.check.link
    span_ns = max(link.end_ns - link.start_ns, 1)
    counted = evidence.counted()
    marks = [(e.origin, e.bearing_deg, e.bearing_uncertainty_deg or 0.0,
              0.1 + 0.9 * min(max((e.onset_ns - link.start_ns) / span_ns, 0.0), 1.0))
             for e in counted if e.bearing_deg is not None]
    return marks, len(counted) - len(marks)


def bearings_plot(evidence: WindowEvidence) -> tuple[str, str, str] | None:
    """(title, caption, data URI) of the polar plot: north up, clockwise; the sector a shaded
    wedge; each counted event at its bearing, nearer the centre the earlier in the finding,
    with an arc for its uncertainty. None when the window states no sector and no counted
    event has a bearing (a single microphone: nothing to draw)."""
    sector = (evidence.fields.get("from_premises") or {}).get("sector")
    marks, without = event_marks(evidence)
    if sector is None and not marks:
        return None
    figure = plt.figure(figsize=(5, 5))
    axes = figure.add_subplot(projection="polar")
    assert isinstance(axes, PolarAxes)
    axes.set_theta_zero_location("N")
    axes.set_theta_direction(-1)  # compass bearings: clockwise from north
    if sector is not None:
        centre, half = float(sector["bearing_deg"]), float(sector["half_width_deg"])
        axes.bar(math.radians(centre), 1.1, width=math.radians(2 * half), bottom=0.0,
                 color="#cccccc", edgecolor="#555555", hatch="//", alpha=0.6,
                 label="the premises' sector", zorder=1)
    for origin, (marker, face, edge, label) in ORIGIN_MARKS.items():
        mine = [m for m in marks if m[0] == origin]
        for _, bearing, half_arc, radius in mine:
            arc = np.radians(np.linspace(bearing - half_arc, bearing + half_arc, 24))
            axes.plot(arc, np.full(arc.shape, radius), color=edge, lw=0.8, zorder=2)
        if mine:
            axes.scatter([math.radians(m[1]) for m in mine], [m[3] for m in mine],
                         marker=marker, facecolors=face, edgecolors=edge, s=24, label=label,
                         zorder=3)
    axes.set_ylim(0.0, 1.1)
    axes.set_yticks([])
    axes.set_xticks(np.radians(np.arange(0, 360, 45)))
    axes.set_xticklabels(["N", "45°", "E", "135°", "S", "225°", "W", "315°"])
    axes.set_title(BEARING_TITLE, fontsize=9, pad=28)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(loc="upper left", bbox_to_anchor=(0.9, 1.1), fontsize=7, framealpha=0.9)
    return BEARING_TITLE, bearings_caption(evidence, len(marks), without), figure_data_uri(figure)


def bearings_caption(evidence: WindowEvidence, drawn: int, without: int) -> str:
    """What to read in the polar plot."""
    sector = (evidence.fields.get("from_premises") or {}).get("sector")
    wedge = ("the shaded wedge is the premises' sector as entered in the installation record "
             f"({float(sector['bearing_deg']):.0f}° ± {float(sector['half_width_deg']):.0f}°)"
             if sector is not None else "no premises' sector is entered, so none is drawn")
    return (f"Read: north up, bearings clockwise from the sensor; {wedge}. Each of the "
            f"{drawn} mark(s) is a counted event at its bearing, nearer the centre the earlier "
            "in the finding, its arc the bearing's uncertainty; filled: from the sector, "
            "hollow: from elsewhere, grey triangle: its interval straddles the sector's edge "
            f"(counted as no bearing). {without} counted event(s) had no bearing and are not "
            "drawn.")
