"""Hostile frame payloads through the analyzer's decode-and-validate function (issue 23 item 2):
a Frame or a Rejection naming a known reason, never another exception.

The fuzzer itself is benchmarks/fuzz_payloads.py (100,000 payloads, benchmarks/README.md); here
a seeded run of 2,000, then one known answer per rejection reason.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from analyzer.ingest.frame_check import Rejection, check_frame
from analyzer.ingest.service import FRAME_SHAPE
from benchmarks.fuzz_payloads import DEVICE, fuzz, real_frames
from sensor.errors import WireReason
from sensor.wire import MAX_PAYLOAD_BYTES, encode_frame


def _checked(payload: bytes, device: str = DEVICE) -> Any:
    return check_frame(device, payload, MAX_PAYLOAD_BYTES, FRAME_SHAPE)


def _valid_map() -> dict[str, Any]:
    return dict(msgpack.unpackb(encode_frame(real_frames()[0]), raw=False))


def _with(**changes: Any) -> bytes:
    payload = _valid_map()
    payload.update(changes)
    return bytes(msgpack.packb(payload, use_bin_type=True))


def _without(key: str) -> bytes:
    payload = _valid_map()
    del payload[key]
    return bytes(msgpack.packb(payload, use_bin_type=True))


def test_2000_seeded_hostile_payloads_give_frames_or_rejections_with_known_reasons() -> None:
    report = fuzz(2000, seed_value=23, time_limit_s=600.0)
    assert report.crashes == []
    assert report.unnamed_rejections == []
    assert report.payloads == 2000
    assert report.accepted + sum(report.rejected.values()) == 2000
    assert report.accepted > 0  # the valid frames among them get through
    assert set(report.kinds) == {"field", "bytes", "bomb", "valid", "random"}


def test_an_unchanged_real_frame_is_accepted() -> None:
    assert not isinstance(_checked(encode_frame(real_frames()[0])), Rejection)


KNOWN_ANSWERS = {
    "too_large": (b"\xc4\x00" + b"\x00" * MAX_PAYLOAD_BYTES, WireReason.TOO_LARGE),
    "reserved byte": (b"\xc1", WireReason.NOT_MSGPACK),
    "64,000 empty arrays": (b"\xdd\x00\x00\xfa\x00" + b"\x90" * 64_000, WireReason.NOT_A_MAP),
    "map of 100 keys": (msgpack.packb({f"k{i}": 0 for i in range(100)}), WireReason.NOT_MSGPACK),
    "schema version 99": (msgpack.packb({"v": 99}), WireReason.VERSION),
}


@pytest.mark.parametrize("payload, reason", KNOWN_ANSWERS.values(), ids=KNOWN_ANSWERS.keys())
def test_a_hostile_payload_is_rejected_with_its_reason(payload: bytes, reason: str) -> None:
    outcome = _checked(payload)
    assert isinstance(outcome, Rejection)
    assert outcome.reason == reason
    assert outcome.message


def test_a_frame_without_its_sequence_number_is_a_missing_field() -> None:
    outcome = _checked(_without("seq"))
    assert isinstance(outcome, Rejection)
    assert (outcome.reason, outcome.message) == ("missing_field", "missing field(s): seq")


def test_a_frame_with_an_extra_key_is_an_unknown_field() -> None:
    outcome = _checked(_with(extra=1))
    assert isinstance(outcome, Rejection) and outcome.reason == "unknown_field"


def test_a_text_sequence_number_is_a_wrong_type() -> None:
    outcome = _checked(_with(seq="7"))
    assert isinstance(outcome, Rejection) and outcome.reason == "wrong_type"
    assert "'seq'" in outcome.message


def test_a_nan_level_is_not_finite() -> None:
    outcome = _checked(_with(la=float("nan")))
    assert isinstance(outcome, Rejection) and outcome.reason == "not_finite"
    assert "'la'" in outcome.message


def test_band_levels_of_an_odd_byte_count_are_a_bad_array() -> None:
    outcome = _checked(_with(bands=b"\x00" * 7))
    assert isinstance(outcome, Rejection) and outcome.reason == "bad_array"
    assert "'bands'" in outcome.message


def test_an_unsupported_sample_rate_is_out_of_range() -> None:
    outcome = _checked(_with(sr=12345))
    assert isinstance(outcome, Rejection) and outcome.reason == "out_of_range"
    assert "'sr'" in outcome.message


def test_a_frame_on_another_devices_topic_is_a_device_mismatch() -> None:
    outcome = _checked(encode_frame(real_frames()[0]), device="someone-else")
    assert isinstance(outcome, Rejection) and outcome.reason == "device_mismatch"


def test_a_calibration_no_sensor_accepts_is_implausible() -> None:
    outcome = _checked(_with(fs_db=20.0))  # the wire takes any number; a sensor 60..200 dB
    assert isinstance(outcome, Rejection) and outcome.reason == "implausible"
    assert "'fs_db'" in outcome.message

