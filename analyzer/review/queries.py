"""InfluxQL behind the pages: a finding's plots downsampled in InfluxDB (``GROUP BY time``),
never in Python, and a device's state (online, last frame, calibration, coverage).

Device ids are checked against the wire's pattern before they reach a query; times are
integer ns. Schema: docs/INFLUXDB.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from analyzer.cases import CITY_ZONE
from analyzer.errors import AnalyzerError
from analyzer.store import InfluxClient
from analyzer.store.rollup import LEVEL_ROLLUP, PROGRESS_ROLLUP, ROLLUP_S
from sensor.wire import DEVICE_ID_PATTERN

NS = 1_000_000_000
# Bucket widths a plot may use, s: the smallest that keeps a series under the point budget.
INTERVALS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
               43200, 86400)
MAX_EVENTS_LISTED = 2000  # more events than this in view are drawn as counts per bucket


class QueryInputError(AnalyzerError):
    """A plot or device request that cannot be turned into a query (names what)."""


class RollupMissing(AnalyzerError):
    """A wide plot's range has frames but no one-minute rollups (they were never made)."""


def device_clause(device_id: str) -> str:
    """``device = '...'`` for a device id that matches the wire's pattern."""
    if not DEVICE_ID_PATTERN.match(device_id):
        raise QueryInputError(f"device id {device_id!r} is not valid")
    return f"device = '{device_id}'"


def interval_s(span_ns: int, max_points: int) -> int:
    """The bucket width for ``span_ns`` at most ``max_points`` buckets (1 s at the finest:
    a frame is one second)."""
    if span_ns <= 0 or max_points <= 0:
        raise QueryInputError("a plot's range must be longer than zero and have points")
    for width in INTERVALS_S:
        if span_ns / (width * NS) <= max_points:
            return width
    return INTERVALS_S[-1]


def _values(series: list[dict[str, Any]]) -> list[list[Any]]:
    return [list(v) for s in series for v in s["values"]]


def _ms(ns: Any) -> int:
    return int(ns) // 1_000_000


def _round(value: Any, digits: int = 2) -> float | None:
    return None if value is None else round(float(value), digits)


@dataclass(frozen=True)
class PlotData:
    """A finding's plot over [start_ns, end_ns): buckets of ``interval_s`` seconds."""

    start_ns: int
    end_ns: int
    interval_s: int
    levels: list[list[Any]]  # [t_ms, mean LAeq, max LAFmax] per bucket with data
    events: list[dict[str, Any]]  # each event, or [] when counted per bucket
    event_counts: list[list[int]]  # [t_ms, events] per bucket when too many to list
    progress: list[list[Any]]  # [t_ms, longest episode_s, longest stretch_s] per bucket
    level_points: int | None  # frames stored in range when buckets are 1 s (None: not counted)
    source: str = "level"  # the measurement levels were read from (level_1m: the rollup)

    def as_json(self) -> dict[str, Any]:
        """The JSON the finding page's script draws."""
        return {"start_ms": _ms(self.start_ns), "end_ms": _ms(self.end_ns),
                "interval_s": self.interval_s, "levels": self.levels, "events": self.events,
                "event_counts": self.event_counts, "progress": self.progress,
                "level_points": self.level_points, "source": self.source}


def _events(client: InfluxClient, where: str,
            group: str) -> tuple[list[dict[str, Any]], list[list[int]]]:
    """Each dog event in range, or their count per bucket when there are too many to draw."""
    total = _values(client.query(f"SELECT count(duration_s) FROM dog_event WHERE {where}"))
    if not total:
        return [], []
    if int(total[0][1]) > MAX_EVENTS_LISTED:
        return [], [[_ms(t), int(n)] for t, n in _values(client.query(
            f"SELECT count(duration_s) FROM dog_event WHERE {where} {group}"))]
    return [{"onset_ms": _ms(t), "offset_ms": _ms(offset), "label": label,
             "confidence": _round(confidence, 3), "plainly_audible": audible,
             "laeq_db": _round(laeq, 1)}
            for t, offset, label, confidence, audible, laeq in _values(client.query(
                "SELECT offset_ns, label, confidence, plainly_audible, laeq_db FROM dog_event "
                f"WHERE {where} ORDER BY time ASC"))], []


def plot_data(client: InfluxClient, device_id: str, start_ns: int, end_ns: int,
              max_points: int, rollup_from_s: int | None = None) -> PlotData:
    """Levels, dog events and the rules' progress of a device, downsampled by InfluxDB.

    The level query is two aggregates in one statement, each a pass over every point in
    range (a week: 604,800). Sent as concurrent queries they took 801 ms against 716 ms
    one after the other on the loaded 2-core development machine, so they are not.
    A range of at least ``rollup_from_s`` whose buckets are whole minutes is read from the
    one-minute rollups (:mod:`analyzer.store.rollup`: 60 times fewer points, the same
    means and maxima); None: always the frames."""
    where = f"{device_clause(device_id)} AND time >= {start_ns} AND time < {end_ns}"
    width = interval_s(end_ns - start_ns, max_points)
    group = f"GROUP BY time({width}s) fill(none)"
    wide = (rollup_from_s is not None and width % ROLLUP_S == 0
            and end_ns - start_ns >= rollup_from_s * NS)
    level_sql = (f"SELECT sum(laeq_sum) / sum(frames), max(lafmax_db) FROM {LEVEL_ROLLUP}"
                 if wide else "SELECT mean(laeq_db), max(lafmax_db) FROM level")
    levels = [[_ms(t), _round(mean), _round(peak)] for t, mean, peak in _values(client.query(
        f"{level_sql} WHERE {where} {group}"))]
    if wide and not levels and _values(client.query(
            f"SELECT laeq_db FROM level WHERE {where} LIMIT 1")):
        raise RollupMissing(f"the one-minute rollups ({LEVEL_ROLLUP}) hold nothing for frames "
                            "that are stored in this range: an administrator creates and "
                            "backfills them (docs/DEPLOY.md, 'The one-minute rollups'); zoom "
                            f"in to under {rollup_from_s} s meanwhile")
    events, counts = _events(client, where, group)
    progress_from = PROGRESS_ROLLUP if wide else "rule_progress"
    progress = [[_ms(t), _round(episode, 1), _round(stretch, 1)]
                for t, episode, stretch in _values(client.query(
                    f"SELECT max(episode_s), max(stretch_s) FROM {progress_from} WHERE {where} "
                    f"{group}"))]
    # The frames behind the buckets are counted only when each bucket is one frame.
    level_points = len(levels) if width == 1 else None
    return PlotData(start_ns, end_ns, width, levels, events, counts, progress, level_points,
                    LEVEL_ROLLUP if wide else "level")


@dataclass(frozen=True)
class DeviceState:
    """What the devices page says about one device placed at an address."""

    device_id: str
    online: bool | None  # last status message; None: never reported
    status_ns: int | None
    last_frame_ns: int | None
    calibration_date: str
    full_scale_db: float | None
    last_heartbeat: dict[str, Any] = field(default_factory=dict)
    last_laeq_db: float | None = None  # the last stored second's LAeq
    coverage: list[tuple[int, float]] = field(default_factory=list)  # (Chicago day, 0..1)
    covered_s: int = 0
    span_s: int = 0

    @property
    def coverage_fraction(self) -> float | None:
        """Seconds measured over seconds placed (None: no time placed yet)."""
        return self.covered_s / self.span_s if self.span_s > 0 else None


HEARTBEAT_FIELDS = ("clock_synchronised", "outbox_backlog", "lost_samples", "software_version",
                    "uptime_s")


def chicago_midnight_ns(ns: int) -> int:
    """The start of the America/Chicago day that holds ``ns``."""
    day = datetime.fromtimestamp(ns / NS, tz=CITY_ZONE).date()
    return int(datetime(day.year, day.month, day.day, tzinfo=CITY_ZONE).timestamp()) * NS


def frames_per_day(client: InfluxClient, device_id: str, start_ns: int,
                   end_ns: int) -> list[tuple[int, int]]:
    """(Chicago day start ns, frames stored that day within [start_ns, end_ns))."""
    rows = _values(client.query(
        f"SELECT count(laeq_db) FROM level WHERE {device_clause(device_id)} AND time >= "
        f"{start_ns} AND time < {end_ns} GROUP BY time(1d) fill(0) tz('{CITY_ZONE.key}')"))
    return [(int(t), int(n)) for t, n in rows]


class DailyFrames:
    """Frames per Chicago day, for the devices page. Counting a week is one pass over 604,800
    points, so the days before today are reused for ``reuse_s`` seconds (a frame that
    arrives late for an earlier day shows once that has passed); today is counted each time."""

    def __init__(self, client: InfluxClient, reuse_s: float, clock: Callable[[], int]) -> None:
        self.client = client
        self.reuse_ns = round(reuse_s * NS)
        self.clock = clock
        self._memo: dict[tuple[str, int, int], tuple[list[tuple[int, int]], int]] = {}
        self._lock = threading.Lock()

    def __call__(self, device_id: str, start_ns: int, end_ns: int) -> list[tuple[int, int]]:
        today = chicago_midnight_ns(end_ns)
        past: list[tuple[int, int]] = []
        if start_ns < today:
            key, now = (device_id, start_ns, today), self.clock()
            with self._lock:
                made = self._memo.get(key)
            if made is not None and now - made[1] < self.reuse_ns:
                past = made[0]
            else:
                past = frames_per_day(self.client, device_id, start_ns, today)
                with self._lock:
                    self._memo[key] = (past, now)
        recent = frames_per_day(self.client, device_id, max(start_ns, today), end_ns) \
            if end_ns > max(start_ns, today) else []
        return past + recent


def device_state(client: InfluxClient, device_id: str, placed_ns: int, until_ns: int,
                 day_frames: Callable[[str, int, int], list[tuple[int, int]]] | None = None,
                 ) -> DeviceState:
    """Status, last frame, calibration and coverage per America/Chicago day (the days an
    officer reads) while the device was placed; ``day_frames`` counts frames per day
    (default :func:`frames_per_day`, a query each time)."""
    clause = device_clause(device_id)
    status = _values(client.query(f"SELECT last(online) FROM sensor_status WHERE {clause}"))
    last = _values(client.query(
        f"SELECT last(laeq_db), calibration_date, full_scale_db FROM level WHERE {clause}"))
    beat = client.query(f"SELECT last(uptime_s), {', '.join(HEARTBEAT_FIELDS[:-1])} FROM "
                        f"sensor_health WHERE {clause}")
    heartbeat: dict[str, Any] = {}
    for s in beat:
        for v in s["values"]:
            heartbeat = dict(zip(s["columns"], v, strict=True))
    days: list[tuple[int, float]] = []
    covered = 0
    span_s = max(0, (until_ns - placed_ns) // NS)
    if span_s:
        count = day_frames or (lambda *a: frames_per_day(client, *a))
        for t, n in count(device_id, placed_ns, until_ns):
            day_start = max(t, placed_ns)
            # A day is 23 or 25 h at a daylight-saving change: its length, not 24 h.
            day_end = min(chicago_midnight_ns(t + 26 * 3600 * NS), until_ns)
            seconds = max(1, (day_end - day_start) // NS)
            days.append((t, min(1.0, n / seconds)))
            covered += n
    return DeviceState(
        device_id,
        online=bool(status[0][1]) if status else None,
        status_ns=int(status[0][0]) if status else None,
        last_frame_ns=int(last[0][0]) if last else None,
        calibration_date=str(last[0][2] or "") if last else "",
        full_scale_db=_round(last[0][3]) if last and last[0][3] is not None else None,
        last_heartbeat=heartbeat, coverage=days, covered_s=covered, span_s=int(span_s),
        last_laeq_db=_round(last[0][1], 1) if last else None)


def frames_since(client: InfluxClient, device_id: str, start_ns: int, end_ns: int) -> int:
    """Frames (level points) the device stored in (start, end]."""
    rows = _values(client.query(f"SELECT count(laeq_db) FROM level WHERE "
                                f"{device_clause(device_id)} AND time > {start_ns} AND "
                                f"time <= {end_ns}"))
    return int(rows[0][1]) if rows else 0


@dataclass(frozen=True)
class StoredBearingCheck:
    """A device's array check as stored (``bearing_check``, sensor/bearing_report.py)."""

    time_ns: int
    expected_deg: float
    tolerance_deg: float
    passed: bool
    measured_deg: float | None
    offset_deg: float | None
    suggested_orientation_deg: float | None
    claps: int
    claps_with_bearing: int


def last_bearing_check(client: InfluxClient, device_id: str,
                       until_ns: int) -> StoredBearingCheck | None:
    """The device's latest array check at or before ``until_ns`` (None: never checked)."""
    rows = client.query(
        "SELECT expected_deg, tolerance_deg, passed, measured_deg, offset_deg, "
        "suggested_orientation_deg, claps, claps_with_bearing FROM bearing_check WHERE "
        f"{device_clause(device_id)} AND time <= {until_ns} ORDER BY time DESC LIMIT 1")
    values = _values(rows)
    if not values:
        return None
    t, expected, tolerance, passed, measured, offset, suggested, claps, found = values[0]
    return StoredBearingCheck(int(t), float(expected), float(tolerance), bool(passed),
                              _round(measured, 1), _round(offset, 1), _round(suggested, 1),
                              int(claps), int(found))
