"""InfluxDB storage over the v1 HTTP API: line protocol to /write, InfluxQL from /query.

Points are built with influxdb-client's ``Point`` (its line-protocol encoder). ``Point``
silently drops NaN, infinite and None field values, so every value is checked first and a bad
one raises instead of vanishing. Schema (docs/INFLUXDB.md):

- ``level`` (tag ``device``): one point per frame at its capture time.
- ``dog_event`` (tags ``device``, ``label``): one point per event at its onset, with its
  level 100 ft beyond the boundary and audibility when the device has an installation record.
- ``background`` (tag ``device``): L90 at the sensor, A-weighted and per band, once a minute.
- ``sensor_health`` (tag ``device``): one point per heartbeat at the sensor's time.
- ``sensor_status`` (tag ``device``): ``online`` true/false when the status topic changes.
- ``analyzer_stats`` (tag ``analyzer``): the analyzer's counters.
"""

from __future__ import annotations

import base64
import collections
import http.client
import json
import logging
import math
import os
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from influxdb_client import Point, WritePrecision

from analyzer.acoustics import BAND_INDICES, Background, EventAudibility
from analyzer.detect import DogEvent
from analyzer.errors import AnalyzerError, InfluxRejected, InfluxUnavailable
from analyzer.store.rollup import create_rollups
from sensor.configfile import setting
from sensor.wire import GATE_DOG, Frame

log = logging.getLogger(__name__)

# ISO 266 R10 nominal labels of the IEC 61260-1 base-10 bands x = -20 .. 13.
NOMINAL_BAND_HZ = (
    10,
    12.5,
    16,
    20,
    25,
    31.5,
    40,
    50,
    63,
    80,
    100,
    125,
    160,
    200,
    250,
    315,
    400,
    500,
    630,
    800,
    1000,
    1250,
    1600,
    2000,
    2500,
    3150,
    4000,
    5000,
    6300,
    8000,
    10000,
    12500,
    16000,
    20000,
)


def band_field(x: int) -> str:
    """Field name of band index ``x``: ``band_1000hz_db``, ``band_31_5hz_db``."""
    nominal = NOMINAL_BAND_HZ[x + 20]
    label = f"{nominal:g}".replace(".", "_")
    return f"band_{label}hz_db"


def _finite(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise AnalyzerError(f"field {name!r} is {value}; InfluxDB would silently drop it")
    return value


def level_point(frame: Frame, max_dog_score: float | None) -> Point:
    """The ``level`` point of one frame (``max_dog_score`` None: a late frame, not scored)."""
    point = (
        Point("level")
        .tag("device", frame.device_id)
        .field("seq", int(frame.seq))
        .field("laeq_db", _finite("laeq_db", frame.laeq_db))
        .field("lafmax_db", _finite("lafmax_db", frame.lafmax_db))
        .field("lafmin_db", _finite("lafmin_db", frame.lafmin_db))
        .field("lasmax_db", _finite("lasmax_db", frame.lasmax_db))
        .field("laf10_db", _finite("laf10_db", frame.laf10_db))
        .field("laf50_db", _finite("laf50_db", frame.laf50_db))
        .field("laf90_db", _finite("laf90_db", frame.laf90_db))
        .field("percentile_window_s", _finite("percentile_window_s", frame.percentile_window_s))
        .field("dc_offset", _finite("dc_offset", frame.dc_offset))
        .field("under_range", bool(frame.under_range))
        .field("calibration_date", frame.calibration_date)
        .field("full_scale_db", _finite("full_scale_db", frame.full_scale_db))
        .field("clipped_samples", int(frame.clipped_samples))
        .time(frame.capture_ns, WritePrecision.NS)
    )
    if frame.gate == GATE_DOG:  # "levels" and "scores" frames (wire v4) carry no LCeq or LZeq
        point.field("lceq_db", _finite("lceq_db", frame.lceq_db))
        point.field("lzeq_db", _finite("lzeq_db", frame.lzeq_db))
    if max_dog_score is not None:
        point.field("max_dog_score", _finite("max_dog_score", max_dog_score))
    if frame.clock_step_ns:  # the sensor's wall clock stepped (NTP) just before this frame
        point.field("clock_step_ns", int(frame.clock_step_ns))
    for offset, level in enumerate(frame.bands_db):
        name = band_field(frame.band_first_index + offset)
        point.field(name, round(_finite(name, float(level)), 2))
    return point


# influxdb-client's line-protocol escapes (its point.py), for the level line built directly.
_ESCAPE_TAG = str.maketrans({",": "\\,", "=": "\\=", " ": "\\ ", "\n": "\\n", "\t": "\\t",
                             "\r": "\\r"})
_ESCAPE_STRING = str.maketrans({'"': '\\"', "\\": "\\\\"})
_LEVEL_FLOATS = ("laeq_db", "lafmax_db", "lafmin_db", "lasmax_db", "laf10_db", "laf50_db",
                 "laf90_db", "percentile_window_s", "dc_offset")
_BAND_FIELDS = {x: band_field(x) for x in range(-20, len(NOMINAL_BAND_HZ) - 20)}


def _line_value(value: float | int | bool | str) -> str:
    """A field value as ``Point.to_line_protocol`` writes it (the value already checked)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        text = str(value)
        return text[:-2] if text.endswith(".0") else text
    return f'"{value.translate(_ESCAPE_STRING)}"'


def level_line(frame: Frame, max_dog_score: float | None, implausible_time: bool) -> str:
    """The line protocol of ``level_point(frame, max_dog_score)`` with the field
    ``implausible_time``: the same text, checked in the same order, built without ``Point``
    (whose generic encoder cost about a tenth of the analyzer's CPU per frame).
    ``tests/test_level_line.py`` compares the two."""
    fields: dict[str, str] = {"seq": f"{int(frame.seq)}i"}
    for name in _LEVEL_FLOATS:
        fields[name] = _line_value(_finite(name, getattr(frame, name)))
    fields["under_range"] = _line_value(bool(frame.under_range))
    fields["calibration_date"] = _line_value(frame.calibration_date)
    fields["full_scale_db"] = _line_value(_finite("full_scale_db", frame.full_scale_db))
    fields["clipped_samples"] = f"{int(frame.clipped_samples)}i"
    if frame.gate == GATE_DOG:
        fields["lceq_db"] = _line_value(_finite("lceq_db", frame.lceq_db))
        fields["lzeq_db"] = _line_value(_finite("lzeq_db", frame.lzeq_db))
    if max_dog_score is not None:
        fields["max_dog_score"] = _line_value(_finite("max_dog_score", max_dog_score))
    if frame.clock_step_ns:
        fields["clock_step_ns"] = f"{int(frame.clock_step_ns)}i"
    first = frame.band_first_index
    for offset, level in enumerate(frame.bands_db.tolist()):
        x = first + offset
        name = _BAND_FIELDS.get(x) or band_field(x)
        fields[name] = _line_value(round(_finite(name, level), 2))
    fields["implausible_time"] = _line_value(bool(implausible_time))
    device = str(frame.device_id).translate(_ESCAPE_TAG)
    if device.endswith("\\"):
        device += " "
    tag = f",device={device}" if device else ""
    body = ",".join(f"{name}={value}" for name, value in sorted(fields.items()))
    return f"level{tag} {body} {int(frame.capture_ns)}"


def event_point(event: DogEvent, audibility: EventAudibility | None = None) -> Point:
    """The ``dog_event`` point of one event, at its onset, with its origin (issue 36), its
    bearing when it has one and its audibility when known."""
    point = (
        Point("dog_event")
        .tag("device", event.device_id)
        .tag("label", event.label)
        .field("offset_ns", int(event.offset_ns))
        .field("duration_s", _finite("duration_s", event.duration_s))
        .field("confidence", _finite("confidence", event.confidence))
        .field("laeq_db", _finite("laeq_db", event.laeq_db))
        .field("lafmax_db", _finite("lafmax_db", event.lafmax_db))
        .field("model_version", event.model_version)
        .field("origin", event.origin)
        .time(event.onset_ns, WritePrecision.NS)
    )
    if event.bearing_deg is not None:  # whose dog (issue 36): absent for no bearing
        point.field("bearing_deg", _finite("bearing_deg", event.bearing_deg))
    if event.bearing_uncertainty_deg is not None:
        point.field("bearing_uncertainty_deg",
                    _finite("bearing_uncertainty_deg", event.bearing_uncertainty_deg))
    if audibility is not None:
        for key, value in audibility.as_dict().items():
            if isinstance(value, float):
                point.field(key, _finite(key, value))
            elif isinstance(value, bool | str):
                point.field(key, value)
    return point


def background_point(device_id: str, background: Background, time_ns: int) -> Point:
    """The ``background`` point: L90 at the sensor, A-weighted and per band."""
    point = (
        Point("background")
        .tag("device", device_id)
        .field("la90_db", _finite("la90_db", background.la90_db))
        .field("seconds", int(background.seconds))
        .field("source", background.source)
        .time(time_ns, WritePrecision.NS)
    )
    for x, level in zip(BAND_INDICES, background.bands_db, strict=True):
        name = band_field(int(x)).replace("_db", "_l90_db")
        point.field(name, round(_finite(name, float(level)), 2))
    return point


HEALTH_FIELDS: Mapping[str, type] = {
    "uptime_s": float,
    "frames": int,
    "lost_samples": int,
    "dropped_blocks": int,
    "overflows": int,
    "queue_depth": int,
    "outbox_backlog": int,
    "outbox_evicted": int,
    "published": int,
    "acknowledged": int,
    "denied": int,
    "inflight": int,
    "connects": int,
    "clock_synchronised": bool,
    "clock_max_error_us": int,
    "clock_steps": int,
    "bearing_dog_seconds": int,  # with a microphone array (issue 36)
    "bearing_with_bearing": int,
    "bearing_not_in_ring": int,
    "full_scale_db": float,
    "calibration_date": str,
    "software_version": str,
    "broker_state": str,
    "broker_error": str,
    "connect_failures": int,
}
MAX_HEALTH_TEXT_CHARS = 256  # text fields are kept to this (a heartbeat is at most 16 KiB)


def health_point(device_id: str, heartbeat: Mapping[str, Any]) -> Point:
    """The ``sensor_health`` point of one heartbeat; unknown keys are ignored, bad types raise."""
    time_ns = heartbeat.get("time_ns")
    if not isinstance(time_ns, int) or isinstance(time_ns, bool) or time_ns <= 0:
        raise AnalyzerError("heartbeat field 'time_ns' is missing or not a positive integer")
    point = Point("sensor_health").tag("device", device_id).time(time_ns, WritePrecision.NS)
    for key, kind in HEALTH_FIELDS.items():
        value = heartbeat.get(key)
        if value is None:
            continue
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise AnalyzerError(f"heartbeat field {key!r}: {value!r} is not a {kind.__name__}")
        if isinstance(value, str):
            value = value[:MAX_HEALTH_TEXT_CHARS]
        point.field(key, _finite(key, value) if isinstance(value, float) else value)
    return point


def status_point(device_id: str, online: bool, time_ns: int) -> Point:
    """The ``sensor_status`` point for an online/offline change."""
    return (
        Point("sensor_status")
        .tag("device", device_id)
        .field("online", bool(online))
        .time(time_ns, WritePrecision.NS)
    )


def stats_point(analyzer_id: str, counters: Mapping[str, int], time_ns: int) -> Point:
    """The ``analyzer_stats`` point with the analyzer's counters."""
    point = Point("analyzer_stats").tag("analyzer", analyzer_id).time(time_ns, WritePrecision.NS)
    for key, value in counters.items():
        point.field(key, int(value))
    return point


@dataclass(frozen=True)
class InfluxSettings:
    """Where evidence is stored: InfluxDB's v1 HTTP API (/write, /query)."""

    url: str = setting("http://127.0.0.1:8086", "base URL of InfluxDB's HTTP API")
    database: str = setting("barkwatch", "database name (created if missing)")
    username: str = setting("", "user name for InfluxDB 1.x authentication; empty = none")
    password_env: str = setting(
        "BARKWATCH_INFLUX_PASSWORD", "environment variable holding the password (or a 2.x token)"
    )
    batch_points: int = setting(5000, "points per write request at most", 1, 100000)
    batch_bytes: int = setting(
        5_000_000, "line-protocol bytes per write request at most (InfluxDB refuses bodies over "
        "its max-body-size, 25 MB by default)", 10_000, 20_000_000,
    )
    timeout_s: float = setting(10.0, "HTTP timeout per request, s", 0.5, 300.0)
    retry_max_s: float = setting(30.0, "cap of the exponential retry backoff, s", 0.1, 600.0)
    refused_points_file: str = setting(
        "", "file that points InfluxDB refuses are appended to, in full, for inspection; "
        "empty: only logged (first 1,000 characters)"
    )
    refused_points_max_bytes: int = setting(
        100_000_000, "refused_points_file stops growing at this size (later refused points "
        "are only logged and counted)", 0, 10_000_000_000,
    )

    def password(self) -> str | None:
        """The password from the environment, or None."""
        return os.environ.get(self.password_env) or None



class InfluxClient:
    """A small client for InfluxDB's v1 HTTP API (every InfluxDB generation serves it).

    Writes go over one kept-alive connection per thread (a connection a request to /write
    cost about half the analyzer's CPU per frame: docs/SCALE.md, "Analyzer CPU per frame");
    queries open one per request. Through a proxy (``http_proxy`` and the like) writes open
    one per request too, as urllib does."""

    def __init__(self, settings: InfluxSettings) -> None:
        self.settings = settings
        self.base = settings.url.rstrip("/")
        self._headers: dict[str, str] = {}
        password = settings.password()
        if settings.username:
            token = base64.b64encode(f"{settings.username}:{password or ''}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        elif password:
            self._headers["Authorization"] = f"Token {password}"
        self._kept = threading.local()  # .connection: this thread's kept write connection
        parts = urllib.parse.urlsplit(self.base)
        proxied = parts.scheme in urllib.request.getproxies() and not (
            parts.hostname and urllib.request.proxy_bypass(parts.hostname))
        self._keep_alive = parts.scheme in ("http", "https") and bool(parts.hostname) \
            and not proxied
        self._split = parts

    def _connection(self) -> http.client.HTTPConnection:
        """This thread's kept connection for writes, made on first use."""
        connection: http.client.HTTPConnection | None = getattr(self._kept, "connection", None)
        if connection is None:
            parts = self._split
            if parts.scheme == "https":
                connection = http.client.HTTPSConnection(
                    parts.hostname or "", parts.port, timeout=self.settings.timeout_s,
                    context=ssl.create_default_context())
            else:
                connection = http.client.HTTPConnection(
                    parts.hostname or "", parts.port, timeout=self.settings.timeout_s)
            self._kept.connection = connection
        return connection

    def close(self) -> None:
        """Close this thread's kept write connection, if any (the next write opens one)."""
        self._drop_connection()

    def _drop_connection(self) -> None:
        connection = getattr(self._kept, "connection", None)
        self._kept.connection = None
        if connection is not None:
            connection.close()

    def _post_kept(self, path: str, params: Mapping[str, str], body: bytes) -> bytes:
        """POST over this thread's kept connection; the same answers and errors as
        :meth:`_request`. A kept connection the server closed while idle is found out by the
        request failing before any answer: it is sent once more on a new connection."""
        target = f"{self._split.path}{path}?{urllib.parse.urlencode(params)}"
        headers = {"Content-Type": "application/x-www-form-urlencoded", **self._headers}
        for attempt in (1, 2):
            reused = getattr(self._kept, "connection", None) is not None
            connection = self._connection()
            try:
                connection.request("POST", target, body=body, headers=headers)
                response = connection.getresponse()
                answer = response.read()
            except (OSError, http.client.HTTPException) as exc:
                self._drop_connection()
                if reused and attempt == 1 and isinstance(exc, (
                        http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
                    continue
                raise InfluxUnavailable(
                    f"InfluxDB at {self.base} is unreachable: {exc}") from exc
            if response.will_close:
                self._drop_connection()
            status = response.status
            if 200 <= status < 300:
                return answer
            detail = answer.decode(errors="replace").strip()
            if 400 <= status < 500 and status not in (401, 403, 404, 429):
                raise InfluxRejected(f"InfluxDB refused {path} ({status}): {detail}")
            raise InfluxUnavailable(f"InfluxDB {path} answered {status}: {detail}")
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _request(self, path: str, params: Mapping[str, str], body: bytes | None) -> bytes:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(
            url, data=body, headers=self._headers, method="POST" if body is not None else "GET"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_s) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip()
            if 400 <= exc.code < 500 and exc.code not in (401, 403, 404, 429):
                raise InfluxRejected(f"InfluxDB refused {path} ({exc.code}): {detail}") from exc
            raise InfluxUnavailable(f"InfluxDB {path} answered {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise InfluxUnavailable(f"InfluxDB at {self.base} is unreachable: {reason}") from exc

    def query(self, influxql: str, database: str | None = None) -> list[dict[str, Any]]:
        """Run InfluxQL; return the series of the first statement (name, columns, values).

        Timestamps come back as integer ns since the epoch.
        """
        params = {"q": influxql, "epoch": "ns"}
        db = self.settings.database if database is None else database
        if db:
            params["db"] = db
        raw = self._request("/query", {}, urllib.parse.urlencode(params).encode())
        document = json.loads(raw)
        results = document.get("results", [])
        if not results:
            return []
        first = results[0]
        if "error" in first:
            raise InfluxRejected(f"InfluxQL {influxql!r} failed: {first['error']}")
        return list(first.get("series", []))

    def create_database(self) -> None:
        """CREATE DATABASE unless it exists. Creating needs admin rights, which the analyzer's
        user lacks when an admin made the database for it (docs/DEPLOY.md); SHOW DATABASES
        lists what that user may use."""
        series = self.query("SHOW DATABASES", database="")
        names = {row[0] for s in series for row in s.get("values", [])}
        if self.settings.database in names:
            return
        name = self.settings.database.replace('"', '\\"')
        self.query(f'CREATE DATABASE "{name}"', database="")
        create_rollups(self)  # wide plots read the one-minute rollups (rollup.py)

    def ping(self) -> bool:
        """Whether InfluxDB answers at all (GET /ping)."""
        try:
            self._request("/ping", {}, None)
            return True
        except AnalyzerError:
            return False

    def chunks(self, lines: Sequence[str]) -> list[tuple[int, int]]:
        """``[start, end)`` index ranges of ``lines`` that fit one write request: at most
        ``batch_points`` lines and ``batch_bytes`` bytes (a longer line goes alone)."""
        ranges: list[tuple[int, int]] = []
        start, size = 0, 0
        for i, line in enumerate(lines):
            length = len(line.encode()) + 1
            if i > start and (
                i - start >= self.settings.batch_points or size + length > self.settings.batch_bytes
            ):
                ranges.append((start, i))
                start, size = i, 0
            size += length
        if start < len(lines):
            ranges.append((start, len(lines)))
        return ranges

    def write_request(self, lines: Sequence[str]) -> None:
        """POST ``lines`` (ns precision) in one request, creating the database if missing."""
        body = "\n".join(lines).encode()
        params = {"db": self.settings.database, "precision": "ns"}
        post = self._post_kept if self._keep_alive else self._request
        try:
            post("/write", params, body)
        except InfluxUnavailable as exc:
            if "database not found" not in str(exc):
                raise
            self.create_database()
            post("/write", params, body)

    def write_lines(self, lines: Sequence[str]) -> None:
        """POST line protocol (ns precision) in requests of at most ``batch_points`` lines and
        ``batch_bytes`` bytes."""
        for start, end in self.chunks(lines):
            self.write_request(lines[start:end])


class BodyRefused(InfluxRejected):
    """InfluxDB answers, yet dropped the connection on this request: its body is too large."""


def _write_once(client: InfluxClient, lines: Sequence[str]) -> None:
    try:
        client.write_request(lines)
    except InfluxUnavailable as exc:
        # InfluxDB 1.x resets the connection (no 413 arrives) while a body over its
        # max-body-size is still being sent. If it answers a ping, the body was the problem.
        if len(lines) > 1 and "unreachable" in str(exc) and client.ping():
            raise BodyRefused(f"InfluxDB dropped a write of {len(lines)} points ({exc})") from exc
        raise


def write_with_retry(
    client: InfluxClient, lines: Sequence[str], stop: threading.Event, on_retry: Any = None
) -> list[tuple[int, str]] | None:
    """Write until stored, retrying with capped exponential backoff while InfluxDB is away.

    Returns the lines InfluxDB refused, as (index in ``lines``, InfluxDB's reason); empty
    when everything was stored. A request InfluxDB refuses (HTTP 4xx: a malformed point, a
    field type conflict, a body too large) is split in halves and each half written again,
    down to single lines: one bad point costs about log2(n) requests and never blocks the
    others (InfluxDB 1.x may have stored the valid points of a refused request already;
    writing them again is harmless, same series and time). Returns None when ``stop`` was
    set first: the caller keeps every line and its MQTT messages unacknowledged.
    """
    refused: list[tuple[int, str]] = []
    todo = collections.deque(client.chunks(lines))
    delay = 0.1
    while todo:
        start, end = todo[0]
        try:
            _write_once(client, lines[start:end])
        except InfluxRejected as exc:
            todo.popleft()
            if end - start == 1:
                refused.append((start, str(exc)))
            else:
                middle = (start + end) // 2
                todo.extendleft([(middle, end), (start, middle)])
            continue
        except InfluxUnavailable as exc:
            if on_retry is not None:
                on_retry()
            log.warning("%s; retrying in %.1f s", exc, delay)
            if stop.wait(delay):
                return None
            delay = min(delay * 2.0, client.settings.retry_max_s)
            continue
        todo.popleft()
        delay = 0.1
    return refused


class RefusedPoints:
    """Where points InfluxDB refused are set aside: logged (the first ``LOG_CHARS``
    characters) and, when ``path`` is set, appended in full to that file after a comment line
    with the time and InfluxDB's reason, until the file holds ``max_bytes``."""

    LOG_CHARS = 1000

    def __init__(self, path: str, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes

    def set_aside(self, line: str, reason: str, time_ns: int) -> None:
        """Keep one refused line for inspection."""
        kept = ""
        if self.path:
            record = f"# {time_ns} {reason.replace(chr(10), ' ')}\n{line}\n".encode()
            try:
                with open(self.path, "ab") as file:
                    if file.tell() + len(record) <= self.max_bytes:
                        file.write(record)
                        kept = f"; kept in {self.path}"
                    else:
                        kept = f"; {self.path} is full ({self.max_bytes} bytes), not kept"
            except OSError as exc:
                kept = f"; could not keep it in {self.path}: {exc}"
        shown = line if len(line) <= self.LOG_CHARS else f"{line[: self.LOG_CHARS]}..."
        log.error("InfluxDB refused a point (%s)%s: %s", reason, kept, shown)
