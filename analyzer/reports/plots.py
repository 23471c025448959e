"""The report's plots (matplotlib, Agg), each a PNG as a ``data:`` URI so the HTML stands alone.

Per linked window: levels with the dog events, the rule's running length against its
threshold, events per minute, and the gaps between events against the rule's gap. Each comes
with a caption saying what to read in it (:func:`plot_captions`).

Printed reports are often grey: plainly audible events are near-black, events judged not
plainly audible light, events not assessed mid-grey and hatched, so the three stay apart
without colour (tests/test_report_print.py converts a plot to grey and compares). Ticks are
round values at an even step (:mod:`analyzer.reports.ticks`).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # no display on a server; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from analyzer.cases import format_time  # noqa: E402
from analyzer.ordinance import RuleEvent  # noqa: E402
from analyzer.reports.gather import WindowEvidence  # noqa: E402
from analyzer.reports.ticks import nice_ticks  # noqa: E402

NS = 1_000_000_000
PLOT_TITLES = ("Sound level and dog events", "The rule's progress against its threshold",
               "Dog events per minute", "Gaps between events")
MOST_TIME_TICKS = 10  # on a 9-inch time axis: labels never crowd
MOST_VALUE_TICKS = 6

# (face colour, alpha, hatch) per audibility: grey levels over white about 0.31, 0.65, 0.89.
AUDIBLE = ("#67001f", 0.8, "")
NOT_ASSESSED = ("#4393c3", 0.7, "xx")
NOT_AUDIBLE = ("#f4a582", 0.4, "")
SHADING_LABELS = ("plainly audible at 100 ft (dark)", "not assessed (grey, hatched)",
                  "not plainly audible at 100 ft (light)")


def figure_data_uri(figure: Figure) -> str:
    """The figure as a PNG ``data:`` URI (closed afterwards)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _minutes(ns: int, origin_ns: int) -> float:
    return (ns - origin_ns) / NS / 60.0


def _limit_and_gap_s(evidence: WindowEvidence) -> tuple[float, float]:
    parameters = evidence.fields.get("parameters", {})
    if evidence.check.link.rule == "continuous":
        return (float(parameters.get("continuous_limit_s", 420.0)),
                float(parameters.get("continuity_gap_s", 60.0)))
    return (float(parameters.get("intermittent_limit_s", 3600.0)),
            float(parameters.get("intermittency_gap_s", 600.0)))


def _shading(event: RuleEvent) -> tuple[str, float, str]:
    if event.plainly_audible is True:
        return AUDIBLE
    return NOT_AUDIBLE if event.plainly_audible is False else NOT_ASSESSED


def _time_axis(axes: Axes, lo_min: float, hi_min: float, start_ns: int) -> None:
    """x from ``lo_min`` to ``hi_min`` minutes after ``start_ns``, round ticks inside it."""
    axes.set_xlim(lo_min, hi_min)
    axes.set_xticks(nice_ticks(lo_min, hi_min, MOST_TIME_TICKS))
    axes.set_xlabel(f"minutes from the finding's start, {format_time(start_ns)}")


def _value_axis(axes: Axes, lo: float, hi: float) -> None:
    axes.set_ylim(lo, hi)
    axes.set_yticks(nice_ticks(lo, hi, MOST_VALUE_TICKS))


def _span_min(evidence: WindowEvidence) -> tuple[float, float]:
    """The plotted stretch: the finding with what was read around it (gather.PAD_NS)."""
    link = evidence.check.link
    times = [t for t, _ in evidence.levels] + [e.onset_ns for e in evidence.events]
    lo = min([link.start_ns, *times])
    hi = max([link.end_ns, *times, *(e.offset_ns for e in evidence.events)])
    return _minutes(lo, link.start_ns), _minutes(hi, link.start_ns)


def levels_figure(evidence: WindowEvidence) -> Figure:
    """LAeq per second with each dog event shaded by its audibility, the finding's span
    marked."""
    link = evidence.check.link
    figure, axes = plt.subplots(figsize=(9, 3))
    levels = [level for _, level in evidence.levels]
    if evidence.levels:
        axes.plot([_minutes(t, link.start_ns) for t, _ in evidence.levels], levels, lw=0.6,
                  color="#111111", label="LAeq,1s", zorder=3)
    for event in evidence.events:
        colour, alpha, hatch = _shading(event)
        axes.axvspan(_minutes(event.onset_ns, link.start_ns),
                     _minutes(max(event.offset_ns, event.onset_ns + NS // 5), link.start_ns),
                     facecolor=colour, alpha=alpha, hatch=hatch, edgecolor="#333333", lw=0,
                     zorder=1)
    axes.axvline(0.0, color="#1f77b4", ls="--", lw=1, zorder=2)
    axes.axvline(_minutes(link.end_ns, link.start_ns), color="#1f77b4", ls="--", lw=1, zorder=2)
    _time_axis(axes, *_span_min(evidence), link.start_ns)
    lo, hi = (min(levels), max(levels)) if levels else (30.0, 90.0)
    _value_axis(axes, lo - 5.0, hi + 5.0)
    axes.set_ylabel("LAeq at the sensor, dB")
    axes.set_title(PLOT_TITLES[0])
    shown = {_shading(e) for e in evidence.events}
    handles = [Patch(facecolor=s[0], alpha=s[1], hatch=s[2], edgecolor="#333333", lw=0,
                     label=label)
               for s, label in zip((AUDIBLE, NOT_ASSESSED, NOT_AUDIBLE), SHADING_LABELS,
                                   strict=True) if s in shown]
    axes.legend(handles=[*axes.get_lines()[:1], *handles,
                         plt.Line2D([], [], color="#1f77b4", ls="--", lw=1,
                                    label="finding start / end")],
                loc="upper right", fontsize=7, framealpha=0.9)
    return figure


def progress_points(evidence: WindowEvidence) -> tuple[list[float], list[float]]:
    """(minutes from the finding's start, running length in minutes) of the group of
    counted events: it grows while each gap stays under the rule's gap and starts again
    at 0 when one reaches it."""
    link = evidence.check.link
    _, gap_s = _limit_and_gap_s(evidence)
    xs: list[float] = []
    ys: list[float] = []
    start = end = None
    for event in sorted(evidence.counted(), key=lambda e: e.onset_ns):
        if start is None or end is None or event.onset_ns - end >= round(gap_s * NS):
            start, end = event.onset_ns, event.offset_ns  # the gap ends the group
            xs.append(_minutes(event.onset_ns, link.start_ns))
            ys.append(0.0)
        end = max(end, event.offset_ns)
        xs.append(_minutes(end, link.start_ns))
        ys.append((end - start) / NS / 60.0)
    return xs, ys


def progress_figure(evidence: WindowEvidence) -> Figure:
    """Running length of the group of counted events against the rule's limit."""
    link = evidence.check.link
    limit_s, _ = _limit_and_gap_s(evidence)
    xs, ys = progress_points(evidence)
    figure, axes = plt.subplots(figsize=(9, 3))
    axes.plot(xs, ys, color="#2ca02c", lw=1.4, label=f"{link.rule} length")
    axes.axhline(limit_s / 60.0, color="#d62728", ls="--",
                 label=f"threshold: more than {limit_s / 60.0:g} min")
    _time_axis(axes, *_span_min(evidence), link.start_ns)
    _value_axis(axes, 0.0, 1.1 * max([limit_s / 60.0, *ys]))
    axes.set_ylabel("running length, min")
    axes.set_title(PLOT_TITLES[1])
    axes.legend(loc="upper left", fontsize=8)
    return figure


def events_per_minute(evidence: WindowEvidence) -> tuple[list[int], list[int]]:
    """(plainly audible, other) dog events starting in each minute of the finding's span."""
    link = evidence.check.link
    minutes = max(1, -(-(link.end_ns - link.start_ns) // (60 * NS)))
    audible, other = [0] * minutes, [0] * minutes
    for event in evidence.events:
        index = (event.onset_ns - link.start_ns) // (60 * NS)
        if 0 <= index < minutes:
            (audible if event.plainly_audible is True else other)[index] += 1
    return audible, other


def events_per_minute_figure(evidence: WindowEvidence) -> Figure:
    """Dog events (every event in the span, counted or not) per minute of the span, the
    plainly audible ones dark at the bottom of each bar."""
    link = evidence.check.link
    audible, other = events_per_minute(evidence)
    figure, axes = plt.subplots(figsize=(9, 2.6))
    minutes = range(len(audible))
    axes.bar(minutes, audible, width=0.9, color=AUDIBLE[0], alpha=AUDIBLE[1], align="edge",
             label=SHADING_LABELS[0])
    axes.bar(minutes, other, bottom=audible, width=0.9, color=NOT_AUDIBLE[0],
             alpha=0.8, edgecolor="#555555", lw=0.5, align="edge",
             label="not plainly audible or not assessed (light)")
    _time_axis(axes, 0.0, float(len(audible)), link.start_ns)
    most = max([a + o for a, o in zip(audible, other, strict=True)] + [1])
    _value_axis(axes, 0.0, most * 1.15)
    axes.set_ylabel("events")
    axes.set_title(PLOT_TITLES[2])
    axes.legend(loc="upper right", fontsize=7)
    return figure


def gap_points(evidence: WindowEvidence) -> tuple[list[float], list[float]]:
    """(minutes from the finding's start, seconds of silence before it) of each counted
    event after the first."""
    link = evidence.check.link
    xs, gaps = [], []
    end = None
    for event in sorted(evidence.counted(), key=lambda e: e.onset_ns):
        if end is not None:
            xs.append(_minutes(event.onset_ns, link.start_ns))
            gaps.append(max(0.0, (event.onset_ns - end) / NS))
        end = event.offset_ns if end is None else max(end, event.offset_ns)
    return xs, gaps


def gaps_figure(evidence: WindowEvidence) -> Figure:
    """Each gap between consecutive counted events against the rule's gap."""
    link = evidence.check.link
    _, gap_s = _limit_and_gap_s(evidence)
    xs, gaps = gap_points(evidence)
    figure, axes = plt.subplots(figsize=(9, 2.6))
    axes.plot(xs, gaps, "o", ms=3, color="#8c564b", label="gap before the event")
    axes.axhline(gap_s, color="#d62728", ls="--", label=f"rule's gap: under {gap_s:g} s")
    _time_axis(axes, *_span_min(evidence), link.start_ns)
    _value_axis(axes, 0.0, 1.15 * max([gap_s, *gaps]))
    axes.set_ylabel("seconds")
    axes.set_title(PLOT_TITLES[3])
    axes.legend(loc="upper right", fontsize=8)
    return figure


def _clock(minutes: float, start_ns: int) -> str:
    """The local clock time ``minutes`` after ``start_ns`` (without the UTC part)."""
    return format_time(start_ns + round(minutes * 60 * NS)).split(" (")[0]


def plot_captions(evidence: WindowEvidence) -> list[str]:
    """What to read in each plot, in :data:`PLOT_TITLES` order, with this window's numbers."""
    link = evidence.check.link
    limit_s, gap_s = _limit_and_gap_s(evidence)
    limit_min = limit_s / 60.0
    crossed_ns = evidence.fields.get("threshold_crossed_ns")
    if crossed_ns is None:  # an older window: where the plotted line first passes the limit
        xs, ys = progress_points(evidence)
        crossed = next((x for x, y in zip(xs, ys, strict=True) if y > limit_min), None)
    else:
        crossed = _minutes(int(crossed_ns), link.start_ns)
    crossing = (f"; here it passes {limit_min:g} min at minute {crossed:.1f} "
                f"({_clock(crossed, link.start_ns)})" if crossed is not None else
                f"; here it never passes {limit_min:g} min")
    audible, other = events_per_minute(evidence)
    empty = sum(1 for a, o in zip(audible, other, strict=True) if a + o == 0)
    quiet = ("every minute has at least one" if empty == 0 else
             f"{empty} of its {len(audible)} minutes have none")
    _, gaps = gap_points(evidence)
    longest = (f"; the highest dot, the longest gap, is {max(gaps):.1f} s" if gaps else "")
    return [
        "Read: the black line is the A-weighted level each second at the sensor; each shaded "
        "band is a dog event, dark where it was plainly audible 100 ft beyond the boundary, "
        "light where it was judged not plainly audible, grey and hatched where it was not "
        "assessed; the dashed blue lines mark where the finding starts (minute 0) and ends.",
        f"Read: the line is how long the barking had lasted so far, counting only the events "
        f"the rule counts; it climbs while each gap stays under {gap_s:g} s and falls back "
        f"to 0 when a gap reaches it. The rule is met once the line is above the dashed line "
        f"(more than {limit_min:g} min){crossing}.",
        f"Read: the height of each bar is the number of dog events that began in that minute "
        f"of the finding, the plainly audible ones dark at the bottom; {quiet}.",
        f"Read: each dot is the silence before a counted event, at the time that event "
        f"began; every dot below the dashed line (under {gap_s:g} s) keeps the barking "
        f"{'continuous' if link.rule == 'continuous' else 'one intermittent stretch'}"
        f"{longest}.",
    ]


def window_plots(evidence: WindowEvidence) -> list[tuple[str, str, str]]:
    """(title, caption, data URI) of each plot, in :data:`PLOT_TITLES` order."""
    figures: Sequence[Figure] = (levels_figure(evidence), progress_figure(evidence),
                                 events_per_minute_figure(evidence), gaps_figure(evidence))
    uris = [figure_data_uri(figure) for figure in figures]
    return list(zip(PLOT_TITLES, plot_captions(evidence), uris, strict=True))
