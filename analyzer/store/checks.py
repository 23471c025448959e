"""The ``bearing_check`` point: a sensor's installation check of its microphone array (issue
36, item 5; :mod:`sensor.bearing_report`), as the review app's field check reads it back.

One point per check at the capture's start, so the retained message delivered again after a
reconnect overwrites its own point instead of adding one. Schema in docs/INFLUXDB.md.
"""

from __future__ import annotations

import json

from influxdb_client import Point, WritePrecision

from sensor.bearing_report import BearingCheckReport

MEASUREMENT = "bearing_check"


def bearing_check_point(report: BearingCheckReport) -> Point:
    """The point of one decoded check (tag ``device``; the measured bearing, its offset and
    the suggested orientation absent when no clap gave a bearing)."""
    point = (Point(MEASUREMENT).tag("device", report.device_id)
             .time(report.time_ns, WritePrecision.NS)
             .field("version", report.version)
             .field("expected_deg", report.expected_deg)
             .field("tolerance_deg", report.tolerance_deg)
             .field("orientation_deg", report.orientation_deg)
             .field("passed", report.passed)
             .field("claps", len(report.claps))
             .field("claps_with_bearing", sum(c.bearing_deg is not None for c in report.claps))
             .field("clap_bearings", json.dumps(
                 [[c.at_s, c.bearing_deg, c.uncertainty_deg, c.reason] for c in report.claps],
                 separators=(",", ":"))))
    optional = {"measured_deg": report.measured_deg, "offset_deg": report.offset_deg,
                "suggested_orientation_deg": report.suggested_orientation_deg}
    for name, value in optional.items():
        if value is not None:
            point.field(name, value)
    return point
