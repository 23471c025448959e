"""InfluxDB points of the ordinance's output: evidence windows and the rules' progress.

Built with influxdb-client's ``Point`` (its line-protocol encoder); schema in docs/INFLUXDB.md.
"""

from __future__ import annotations

from influxdb_client import Point, WritePrecision

from analyzer.ordinance import EvidenceWindow, Progress, finite_json, progress_payload


def window_point(window: EvidenceWindow) -> Point:
    """The ``evidence_window`` point (tags device, rule; time = start of the span)."""
    f = window.fields
    point = (Point("evidence_window").tag("device", window.device_id).tag("rule", window.rule)
             .time(window.start_ns, WritePrecision.NS)
             .field("content", window.content).field("digest", window.digest)
             .field("prev_digest", f["prev_digest"]).field("events_sha256", f["events_sha256"])
             .field("site", f["site"]).field("status", f["status"])
             .field("reading", f["reading"]).field("software_version", f["software_version"])
             .field("model_versions", ",".join(f["model_versions"]))
             .field("parameters", finite_json(f["parameters"], "parameters", sort_keys=True))
             .field("sensitivity", finite_json(f["sensitivity"], "sensitivity",
                                               sort_keys=True))
             .field("end_ns", int(f["end_ns"])).field("close_ns", int(f["close_ns"]))
             .field("events_counted", int(f["events_counted"]))
             .field("audible_events", int(f["audible_events"]))
             .field("events_in_span", int(f["events_in_span"])))
    numbers = {
        "duration_s": f["duration_s"], "longest_gap_s": f["longest_gap_s"],
        "laeq_db": f["levels"]["laeq_db"], "lafmax_db": f["levels"]["lafmax_db"],
        "level_at_100ft_db_max": f["levels"]["level_at_100ft_db_max"],
        "audibility_margin_db_min": f["audibility"]["margin_db_min"],
        "audibility_margin_db_max": f["audibility"]["margin_db_max"],
        "uncertainty_db": f["uncertainty_db"], "uncovered_s": f["coverage"]["uncovered_s"],
    }
    for name, text in numbers.items():
        if text is not None:
            point.field(name, float(text))
    return point


def progress_point(progress: Progress) -> Point:
    """The ``rule_progress`` point (tag device) at ``progress.time_ns``."""
    payload = progress_payload(progress)
    point = Point("rule_progress").tag("device", progress.device_id).time(
        progress.time_ns, WritePrecision.NS)
    for name in ("episode_s", "stretch_s", "continuous_limit_s", "intermittent_limit_s"):
        point.field(name, float(payload[name]))
    for name in ("episode_events", "stretch_events", "late_events"):
        point.field(name, int(payload[name]))
    for name in ("episode_violation", "stretch_violation"):
        point.field(name, bool(payload[name]))
    return point
