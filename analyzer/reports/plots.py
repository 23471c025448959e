"""The report's plots (matplotlib, Agg), each a PNG as a ``data:`` URI so the HTML stands alone.

Per linked window: levels with the dog events, the rule's running length against its
threshold, events per minute, and the gaps between events against the rule's gap.
"""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")  # no display on a server; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analyzer.cases import format_time  # noqa: E402
from analyzer.reports.gather import WindowEvidence  # noqa: E402

NS = 1_000_000_000
PLOT_TITLES = ("Sound level and dog events", "The rule's progress against its threshold",
               "Dog events per minute", "Gaps between events")


def _data_uri(figure: Figure) -> str:
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


def levels_plot(evidence: WindowEvidence) -> str:
    """LAeq per second with the dog events shaded and the finding's span marked."""
    link = evidence.check.link
    figure, axes = plt.subplots(figsize=(9, 3))
    if evidence.levels:
        axes.plot([_minutes(t, link.start_ns) for t, _ in evidence.levels],
                  [level for _, level in evidence.levels], lw=0.6, color="#333333",
                  label="LAeq,1s")
    for event in evidence.events:
        axes.axvspan(_minutes(event.onset_ns, link.start_ns),
                     _minutes(max(event.offset_ns, event.onset_ns + NS // 5), link.start_ns),
                     color="#d62728", alpha=0.35, lw=0)
    axes.axvline(0.0, color="#1f77b4", ls="--", lw=1, label="finding start / end")
    axes.axvline(_minutes(link.end_ns, link.start_ns), color="#1f77b4", ls="--", lw=1)
    axes.set_xlabel(f"minutes from {format_time(link.start_ns)}")
    axes.set_ylabel("LAeq, dB")
    axes.set_title(PLOT_TITLES[0] + " (red: dog events)")
    axes.legend(loc="upper right", fontsize=8)
    return _data_uri(figure)


def progress_plot(evidence: WindowEvidence) -> str:
    """Running length of the group of counted events against the rule's limit."""
    link = evidence.check.link
    limit_s, gap_s = _limit_and_gap_s(evidence)
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
    figure, axes = plt.subplots(figsize=(9, 3))
    axes.plot(xs, ys, color="#2ca02c", lw=1.2, label=f"{link.rule} length")
    axes.axhline(limit_s / 60.0, color="#d62728", ls="--",
                 label=f"threshold: more than {limit_s / 60.0:g} min")
    axes.set_xlabel(f"minutes from {format_time(link.start_ns)}")
    axes.set_ylabel("minutes")
    axes.set_title(PLOT_TITLES[1])
    axes.legend(loc="upper left", fontsize=8)
    return _data_uri(figure)


def events_per_minute_plot(evidence: WindowEvidence) -> str:
    """Dog events (every event in the span, counted or not) per minute of the span."""
    link = evidence.check.link
    minutes = max(1, -(-(link.end_ns - link.start_ns) // (60 * NS)))
    counts = [0] * minutes
    for event in evidence.events:
        index = (event.onset_ns - link.start_ns) // (60 * NS)
        if 0 <= index < minutes:
            counts[index] += 1
    figure, axes = plt.subplots(figsize=(9, 2.6))
    axes.bar(range(minutes), counts, width=0.9, color="#9467bd", align="edge")
    axes.set_xlabel(f"minute from {format_time(link.start_ns)}")
    axes.set_ylabel("events")
    axes.set_title(PLOT_TITLES[2])
    return _data_uri(figure)


def gaps_plot(evidence: WindowEvidence) -> str:
    """Each gap between consecutive counted events against the rule's gap."""
    link = evidence.check.link
    _, gap_s = _limit_and_gap_s(evidence)
    ordered = sorted(evidence.counted(), key=lambda e: e.onset_ns)
    xs, gaps = [], []
    end = None
    for event in ordered:
        if end is not None:
            xs.append(_minutes(event.onset_ns, link.start_ns))
            gaps.append(max(0.0, (event.onset_ns - end) / NS))
        end = event.offset_ns if end is None else max(end, event.offset_ns)
    figure, axes = plt.subplots(figsize=(9, 2.6))
    axes.plot(xs, gaps, "o", ms=3, color="#8c564b", label="gap before the event")
    axes.axhline(gap_s, color="#d62728", ls="--", label=f"rule's gap: under {gap_s:g} s")
    axes.set_xlabel(f"minutes from {format_time(link.start_ns)}")
    axes.set_ylabel("seconds")
    axes.set_title(PLOT_TITLES[3])
    axes.legend(loc="upper right", fontsize=8)
    return _data_uri(figure)


def window_plots(evidence: WindowEvidence) -> list[tuple[str, str]]:
    """(title, data URI) of each plot, in :data:`PLOT_TITLES` order."""
    uris = (levels_plot(evidence), progress_plot(evidence), events_per_minute_plot(evidence),
            gaps_plot(evidence))
    return list(zip(PLOT_TITLES, uris, strict=True))
