"""The bearing check's result on the wire (issue 36, item 5): what ``barkwatch-sensor
bearing-check`` measured, as a small JSON message on ``barkwatch/v1/bearing_check/<device>``
(QoS 1, retained), so that the review app's field check can show it on site.

Pure: :func:`report_of` makes the message from a :class:`~sensor.bearing_check.BearingCheck`,
:func:`encode_report` gives its bytes and :func:`decode_report` reads them back strictly: a
payload over :data:`MAX_REPORT_BYTES`, not one JSON object, with a key missing, unknown or
twice, a value of the wrong type, out of range or not finite, or a verdict that does not
follow from its own numbers raises :class:`~sensor.errors.WireError` naming the field.

Example (docs/WIRE.md)::

    {"v": 1, "device_id": "yard-1", "time_ns": 1780351230000000000, "expected_deg": 250.0,
     "tolerance_deg": 15.0, "orientation_deg": 45.0, "measured_deg": 251.3,
     "offset_deg": 1.3, "suggested_orientation_deg": 43.7, "passed": true,
     "claps": [{"at_s": 1.0, "bearing_deg": 251.3, "uncertainty_deg": 2.0, "reason": ""}]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sensor.bearing_check import BearingCheck
from sensor.errors import WireError, WireReason
from sensor.wire import DEVICE_ID_PATTERN, TOPIC_ROOT

REPORT_VERSION = 1
REPORT_KIND = "bearing_check"  # the topic's <kind>
# 32 claps of about 90 bytes each and the verdict's 300: 4 KiB bounds what json.loads is given.
MAX_REPORT_BYTES = 4096
MAX_CLAPS = 32  # a 10-s check with claps 0.5 s apart holds at most 20
MAX_REASON_CHARS = 32  # doa's reasons ("diffuse", "scattered", "too short") are shorter
MAX_CLAP_AT_S = 3600.0
# 2020-01-01T00:00:00Z: no Barkwatch sensor measured before it; a clock reading 1970 is wrong.
EARLIEST_TIME_NS = 1_577_836_800 * 1_000_000_000
ROUNDING_DEG = 0.02  # encode_report rounds degrees to 0.01
FIELDS = ("v", "device_id", "time_ns", "expected_deg", "tolerance_deg", "orientation_deg",
          "measured_deg", "offset_deg", "suggested_orientation_deg", "passed", "claps")
CLAP_FIELDS = ("at_s", "bearing_deg", "uncertainty_deg", "reason")


def bearing_check_topic(device_id: str) -> str:
    """Topic of a device's latest bearing check (retained)."""
    return f"{TOPIC_ROOT}/{REPORT_KIND}/{device_id}"


@dataclass(frozen=True)
class ClapBearing:
    """One clap's bearing: ``at_s`` from the capture's start (None: the whole capture, a
    tone); ``bearing_deg`` compass degrees, None with ``reason`` when there was none."""

    at_s: float | None
    bearing_deg: float | None
    uncertainty_deg: float | None
    reason: str = ""


@dataclass(frozen=True)
class BearingCheckReport:
    """A bearing check as sent: the device, the capture's start (ns UTC), the expected
    bearing and tolerance, the configured ``orientation_deg``, the circular median measured
    (None: no bearing), its offset from the expected one (-180..180), the orientation that
    would remove it, the verdict and each clap's bearing. Degrees throughout."""

    device_id: str
    time_ns: int
    expected_deg: float
    tolerance_deg: float
    orientation_deg: float
    measured_deg: float | None
    offset_deg: float | None
    suggested_orientation_deg: float | None
    passed: bool
    claps: tuple[ClapBearing, ...]
    version: int = REPORT_VERSION


def report_of(check: BearingCheck, device_id: str, time_ns: int,
              orientation_deg: float) -> BearingCheckReport:
    """The message for ``check``, captured from ``time_ns`` by ``device_id`` whose array is
    configured at ``orientation_deg``."""
    at: list[float | None] = list(check.claps_s) if check.claps_s else [None]
    claps = tuple(ClapBearing(t, b.bearing_deg, b.uncertainty_deg, b.reason[:MAX_REASON_CHARS])
                  for t, b in zip(at, check.bearings, strict=True))
    return BearingCheckReport(device_id, time_ns, check.expected_deg, check.tolerance_deg,
                              orientation_deg % 360.0, check.measured_deg, check.offset_deg,
                              check.suggested_orientation_deg, check.passed,
                              claps[:MAX_CLAPS])


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 2)


def encode_report(report: BearingCheckReport) -> bytes:
    """The message's JSON bytes (keys sorted, degrees to 0.01)."""
    document = {
        "v": report.version, "device_id": report.device_id, "time_ns": report.time_ns,
        "expected_deg": _round(report.expected_deg), "tolerance_deg": _round(report.tolerance_deg),
        "orientation_deg": _round(report.orientation_deg),
        "measured_deg": _round(report.measured_deg), "offset_deg": _round(report.offset_deg),
        "suggested_orientation_deg": _round(report.suggested_orientation_deg),
        "passed": report.passed,
        "claps": [{"at_s": None if c.at_s is None else round(c.at_s, 3),
                   "bearing_deg": _round(c.bearing_deg),
                   "uncertainty_deg": _round(c.uncertainty_deg), "reason": c.reason}
                  for c in report.claps],
    }
    payload = json.dumps(document, sort_keys=True, allow_nan=False).encode()
    if len(payload) > MAX_REPORT_BYTES:  # cannot happen within MAX_CLAPS; never send one
        raise WireError(f"bearing check of {len(payload)} bytes exceeds {MAX_REPORT_BYTES}",
                        WireReason.TOO_LARGE)
    return payload


def _refuse_constant(name: str) -> Any:
    raise WireError(f"bearing check holds {name}, not a finite number", WireReason.NOT_FINITE)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise WireError(f"bearing check has the key {key[:40]!r} twice",
                            WireReason.WRONG_TYPE)
        document[key] = value
    return document


def _keys(document: Any, expected: tuple[str, ...], where: str) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise WireError(f"{where} is not a JSON object", WireReason.NOT_A_MAP)
    missing = [k for k in expected if k not in document]
    if missing:
        raise WireError(f"{where} lacks {', '.join(missing)}", WireReason.MISSING_FIELD)
    unknown = sorted(k for k in document if k not in expected)
    if unknown:
        raise WireError(f"{where} has unknown key(s) {', '.join(k[:40] for k in unknown[:5])}",
                        WireReason.UNKNOWN_FIELD)
    return document


def _number(value: Any, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"{where} is {str(value)[:40]!r}, not a number", WireReason.WRONG_TYPE)
    number = float(value)
    if not low <= number <= high:
        raise WireError(f"{where} is {number}, outside {low:g}..{high:g}",
                        WireReason.OUT_OF_RANGE)
    return number


def _optional(value: Any, where: str, low: float, high: float) -> float | None:
    return None if value is None else _number(value, where, low, high)


def _clap(document: Any, k: int) -> ClapBearing:
    where = f"bearing check clap {k}"
    clap = _keys(document, CLAP_FIELDS, where)
    reason = clap["reason"]
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise WireError(f"{where}: reason is not a text of at most {MAX_REASON_CHARS} "
                        "characters", WireReason.WRONG_TYPE)
    bearing = _optional(clap["bearing_deg"], f"{where}: bearing_deg", 0.0, 360.0)
    uncertainty = _optional(clap["uncertainty_deg"], f"{where}: uncertainty_deg", 0.0, 180.0)
    if (bearing is None) != (uncertainty is None) or (bearing is None) == (reason == ""):
        raise WireError(f"{where}: a bearing comes with an uncertainty and no reason, no "
                        "bearing with a reason", WireReason.OUT_OF_RANGE)
    return ClapBearing(_optional(clap["at_s"], f"{where}: at_s", 0.0, MAX_CLAP_AT_S),
                       bearing, uncertainty, reason)


def decode_report(payload: bytes) -> BearingCheckReport:
    """The bearing check in ``payload``; WireError naming what is wrong otherwise."""
    if len(payload) > MAX_REPORT_BYTES:
        raise WireError(f"bearing check of {len(payload)} bytes exceeds the limit of "
                        f"{MAX_REPORT_BYTES}", WireReason.TOO_LARGE)
    try:
        raw = json.loads(payload, parse_constant=_refuse_constant,
                         object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        if isinstance(exc, WireError):
            raise
        raise WireError(f"bearing check is not JSON: {str(exc)[:200]}",
                        WireReason.WRONG_TYPE) from exc
    document = _keys(raw, FIELDS, "bearing check")
    if document["v"] != REPORT_VERSION or isinstance(document["v"], bool):
        raise WireError(f"bearing check version {str(document['v'])[:20]!r} is not "
                        f"{REPORT_VERSION}", WireReason.VERSION)
    device = document["device_id"]
    if not isinstance(device, str) or not DEVICE_ID_PATTERN.match(device):
        raise WireError(f"bearing check device_id {str(device)[:80]!r} is not a device id",
                        WireReason.OUT_OF_RANGE)
    time_ns = document["time_ns"]
    if isinstance(time_ns, bool) or not isinstance(time_ns, int) or not (
            EARLIEST_TIME_NS <= time_ns < 2**63):
        raise WireError(f"bearing check time_ns {str(time_ns)[:40]!r} is not a time after "
                        "2020 in ns", WireReason.OUT_OF_RANGE)
    claps = document["claps"]
    if not isinstance(claps, list) or not 1 <= len(claps) <= MAX_CLAPS:
        raise WireError(f"bearing check claps is not a list of 1 to {MAX_CLAPS}",
                        WireReason.WRONG_TYPE)
    passed = document["passed"]
    if not isinstance(passed, bool):
        raise WireError("bearing check passed is not true or false", WireReason.WRONG_TYPE)
    report = BearingCheckReport(
        device, time_ns,
        expected_deg=_number(document["expected_deg"], "expected_deg", 0.0, 360.0),
        tolerance_deg=_number(document["tolerance_deg"], "tolerance_deg", 0.0, 180.0),
        orientation_deg=_number(document["orientation_deg"], "orientation_deg", 0.0, 360.0),
        measured_deg=_optional(document["measured_deg"], "measured_deg", 0.0, 360.0),
        offset_deg=_optional(document["offset_deg"], "offset_deg", -180.0, 180.0),
        suggested_orientation_deg=_optional(document["suggested_orientation_deg"],
                                            "suggested_orientation_deg", 0.0, 360.0),
        passed=passed, claps=tuple(_clap(c, k) for k, c in enumerate(claps)))
    _check_verdict(report)
    return report


def _check_verdict(report: BearingCheckReport) -> None:
    """The verdict must follow from the numbers: a message cannot say "passed" for an offset
    beyond its tolerance, nor carry an offset without a measured bearing. 0.02 degrees of
    slack: encode_report rounds every number to 0.01."""
    values = (report.measured_deg, report.offset_deg, report.suggested_orientation_deg)
    if any(v is None for v in values) and not all(v is None for v in values):
        raise WireError("bearing check: measured_deg, offset_deg and suggested_orientation_deg "
                        "are all numbers or all null", WireReason.OUT_OF_RANGE)
    if report.tolerance_deg <= 0.0:
        raise WireError("bearing check tolerance_deg is not above 0", WireReason.OUT_OF_RANGE)
    offset = report.offset_deg
    if offset is not None and report.measured_deg is not None and abs(_signed(
            _signed(report.measured_deg - report.expected_deg) - offset)) > ROUNDING_DEG:
        raise WireError("bearing check offset_deg is not measured_deg - expected_deg",
                        WireReason.OUT_OF_RANGE)
    on_the_edge = offset is not None and abs(abs(offset) - report.tolerance_deg) <= ROUNDING_DEG
    within = offset is not None and abs(offset) <= report.tolerance_deg
    if report.passed != within and not on_the_edge:
        raise WireError(f"bearing check says passed={str(report.passed).lower()} for an offset "
                        f"of {offset} against a tolerance of {report.tolerance_deg}",
                        WireReason.OUT_OF_RANGE)


def _signed(angle_deg: float) -> float:
    return (angle_deg + 180.0) % 360.0 - 180.0
