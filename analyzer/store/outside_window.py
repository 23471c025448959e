"""Points for what claims a time outside the analyzer's window of plausible times.

InfluxDB 1.x makes one shard per week of time a point carries (the default retention policy's
shard group duration), each with its own files: one device sending 15,000 frames a week apart
made 15,002 shards, reached InfluxDB's open-file limit and stopped it answering anyone
(issue 32, item 3). So a frame whose capture time lies outside
``[now - max_frame_age_s, now + max_clock_ahead_s]`` is never written at that time: it is kept
as an ``implausible_frame`` point stamped with its arrival at the analyzer (always the current
shard), its claimed time a field. Heartbeats outside the window are stored at arrival time too,
flagged (``analyzer.ingest.service``).
"""

from __future__ import annotations

from influxdb_client import Point, WritePrecision

from sensor.wire import Frame


def implausible_frame_point(frame: Frame, arrival_ns: int, problem: str) -> Point:
    """The ``implausible_frame`` point of ``frame`` (tag device; time = ``arrival_ns``, the
    analyzer's clock): ``capture_ns`` as claimed, ``seq``, ``reason`` and its A-levels."""
    point = (Point("implausible_frame").tag("device", frame.device_id)
             .field("capture_ns", int(frame.capture_ns)).field("seq", int(frame.seq))
             .field("reason", problem[:200])
             .time(arrival_ns, WritePrecision.NS))
    for name in ("laeq_db", "lafmax_db"):
        value = float(getattr(frame, name))
        if value == value and abs(value) != float("inf"):  # finite (checked on decoding too)
            point.field(name, value)
    return point
