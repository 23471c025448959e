"""The bearing check's result on the wire (issue 36, item 5; sensor/bearing_report.py): a check
made from simulated claps comes back from its bytes as it was sent; every malformed message is
refused with the field named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sensor.array import ArraySettings
from sensor.bearing_check import check_bearing
from sensor.bearing_report import (
    MAX_REPORT_BYTES,
    decode_report,
    encode_report,
    report_of,
)
from sensor.errors import WireError, WireReason
from tests.test_bearing_check import RATE, claps_as_plane_wave

T_NS = 1_780_351_230_000_000_000


def _turned_check_bytes() -> bytes:
    """An array mounted at 100 degrees, configured at 10: three claps from 150 degrees."""
    mounted = ArraySettings(preset="uma8", orientation_deg=100.0)
    configured = ArraySettings(preset="uma8", orientation_deg=10.0)
    check = check_bearing(claps_as_plane_wave(mounted, 150.0), RATE, configured, 0, 150.0)
    return encode_report(report_of(check, "yard-1", T_NS, configured.orientation_deg))


def test_a_failed_check_comes_back_from_its_bytes_with_its_fix() -> None:
    report = decode_report(_turned_check_bytes())
    assert (report.device_id, report.time_ns, report.passed) == ("yard-1", T_NS, False)
    assert (report.expected_deg, report.tolerance_deg, report.orientation_deg) == (
        150.0, 15.0, 10.0)
    assert report.offset_deg == pytest.approx(-90.0, abs=3.0)
    assert report.measured_deg == pytest.approx(60.0, abs=3.0)
    assert report.suggested_orientation_deg == pytest.approx(100.0, abs=3.0)
    assert [round(c.at_s or 0.0, 2) for c in report.claps] == [1.0, 2.7, 4.4]
    assert all(c.bearing_deg is not None and c.reason == "" for c in report.claps)


def _changed(**changes: Any) -> bytes:
    document = json.loads(_turned_check_bytes())
    document.update(changes)
    return json.dumps(document).encode()


@pytest.mark.parametrize(("payload", "reason", "words"), [
    (b"{" + b" " * MAX_REPORT_BYTES + b"}", WireReason.TOO_LARGE, "exceeds the limit"),
    (b"not json", WireReason.WRONG_TYPE, "is not JSON"),
    (b"[1, 2]", WireReason.NOT_A_MAP, "is not a JSON object"),
    (_changed(v=2), WireReason.VERSION, "version '2' is not 1"),
    (_changed(extra=1), WireReason.UNKNOWN_FIELD, "unknown key(s) extra"),
    (_changed(passed=True), WireReason.OUT_OF_RANGE, "says passed=true"),
    (_changed(expected_deg=400.0), WireReason.OUT_OF_RANGE, "expected_deg is 400.0"),
    (_changed(expected_deg="150"), WireReason.WRONG_TYPE, "not a number"),
    (_changed(measured_deg=None), WireReason.OUT_OF_RANGE, "all numbers or all null"),
    (_changed(time_ns=12), WireReason.OUT_OF_RANGE, "not a time after 2020"),
    (_changed(device_id="Yard 1"), WireReason.OUT_OF_RANGE, "is not a device id"),
    (_changed(claps=[]), WireReason.WRONG_TYPE, "claps is not a list"),
    (_turned_check_bytes().replace(b'"offset_deg": ', b'"offset_deg": NaN, "x": '),
     WireReason.NOT_FINITE, "NaN"),
    (_turned_check_bytes().replace(b'"v": 1', b'"v": 1, "v": 1'), WireReason.WRONG_TYPE,
     "the key 'v' twice"),
])
def test_a_malformed_check_is_refused_naming_what_is_wrong(payload: bytes, reason: WireReason,
                                                            words: str) -> None:
    with pytest.raises(WireError) as refused:
        decode_report(payload)
    assert refused.value.reason == reason and words in str(refused.value)
