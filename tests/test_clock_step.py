"""A sensor clock step (NTP correcting the wall clock) is flagged on the frame, on the wire
as the optional ``cstep`` field, and never moves capture time (which counts samples)."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from sensor.errors import WireError
from sensor.frames import frames_from_samples
from sensor.wire import decode_frame, encode_frame
from tests.conftest import sine

FRAME = next(frames_from_samples(sine(1000.0, 0.1, 1.0, 48000), 48000, 120.0,
                                 device_id="dev-1", start_ns=1_700_000_000_000_000_000))
MINUTES_3_NS = 180 * 10**9


def _with_cstep(value: object) -> bytes:
    raw = msgpack.unpackb(encode_frame(FRAME), raw=False)
    raw["cstep"] = value
    return msgpack.packb(raw, use_bin_type=True)


def test_a_frame_without_a_step_carries_no_cstep_field() -> None:
    assert "cstep" not in msgpack.unpackb(encode_frame(FRAME), raw=False)
    assert decode_frame(encode_frame(FRAME)).clock_step_ns == 0


@pytest.mark.parametrize("step_ns", [MINUTES_3_NS, -MINUTES_3_NS])
def test_a_step_survives_the_wire_in_either_direction(step_ns: int) -> None:
    stepped = dataclasses.replace(FRAME, clock_step_ns=step_ns)
    decoded = decode_frame(encode_frame(stepped))
    assert decoded.clock_step_ns == step_ns
    assert decoded.capture_ns == FRAME.capture_ns


@pytest.mark.parametrize(
    ("value", "message"),
    [("180", "field 'cstep': str"), (1.5, "field 'cstep': float"), (True, "field 'cstep': bool"),
     (2**62, "field 'cstep': 4611686018427387904 ns is out of range")],
)
def test_a_bad_cstep_is_refused_by_name(value: object, message: str) -> None:
    with pytest.raises(WireError, match=message):
        decode_frame(_with_cstep(value))
