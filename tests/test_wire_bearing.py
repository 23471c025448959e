"""Wire v4's bearing fields (issue 36): ``br``/``bu`` on dog frames of a sensor with an array,
nil for no bearing, absent without an array, never in a "levels" frame; every bad value named."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from sensor.errors import WireError
from sensor.wire import GATE_DOG, GATE_LEVELS, GATE_QUIET, GATE_SPEECH, decode_frame, encode_frame
from tests.test_wire import FRAME

BEARING = dataclasses.replace(FRAME, bearing_deg=287.25, bearing_uncertainty_deg=4.5,
                              bearing_estimated=True)
NO_BEARING = dataclasses.replace(FRAME, bearing_estimated=True)


def _raw(frame=BEARING) -> dict:
    return msgpack.unpackb(encode_frame(frame), raw=False)


def _packed(raw: dict) -> bytes:
    return msgpack.packb(raw, use_bin_type=True)


def test_a_dog_frames_bearing_and_uncertainty_round_trip_exactly():
    back = decode_frame(encode_frame(BEARING))
    assert (back.bearing_deg, back.bearing_uncertainty_deg, back.bearing_estimated) == (
        287.25, 4.5, True)
    assert back == dataclasses.replace(back, bearing_deg=287.25)  # the rest as before


def test_no_bearing_travels_as_nil_and_comes_back_as_none():
    raw = _raw(NO_BEARING)
    assert raw["br"] is None and raw["bu"] is None
    back = decode_frame(encode_frame(NO_BEARING))
    assert back.bearing_estimated and back.bearing_deg is None
    assert back.bearing_uncertainty_deg is None


def test_a_sensor_without_an_array_sends_no_bearing_field_at_all():
    raw = _raw(FRAME)
    assert "br" not in raw and "bu" not in raw
    assert not decode_frame(encode_frame(FRAME)).bearing_estimated


def test_the_bearing_costs_a_dog_frame_24_bytes_and_no_bearing_8():
    assert len(encode_frame(BEARING)) - len(encode_frame(FRAME)) == 24  # 2 x (key 3 + float64 9)
    assert len(encode_frame(NO_BEARING)) - len(encode_frame(FRAME)) == 8  # 2 x (key 3 + nil 1)


@pytest.mark.parametrize("gate", [GATE_SPEECH, GATE_QUIET])
def test_levels_frames_carry_no_bearing_and_are_byte_for_byte_as_before(gate):
    with_bearing = encode_frame(dataclasses.replace(BEARING, gate=gate))
    assert with_bearing == encode_frame(dataclasses.replace(FRAME, gate=gate))
    assert decode_frame(with_bearing).bearing_deg is None


def test_a_bearing_in_a_levels_frame_is_refused():
    raw = _raw(dataclasses.replace(FRAME, gate=GATE_SPEECH)) | {"br": 10.0, "bu": 3.0}
    assert raw["g"] == GATE_LEVELS
    with pytest.raises(WireError, match=r"field\(s\) br, bu: not sent in a 'levels' frame"):
        decode_frame(_packed(raw))


def test_a_bearing_of_minus_zero_point_something_is_sent_as_north():
    frame = dataclasses.replace(BEARING, bearing_deg=-1e-15)
    assert _raw(frame)["br"] == 0.0


@pytest.mark.parametrize(("changes", "message"), [
    ({"br": 360.0}, r"field 'br': bearing 360.0 is outside 0..360 degrees"),
    ({"br": -3.0}, r"field 'br': bearing -3.0 is outside 0..360"),
    ({"br": float("nan")}, r"field 'br': bearing nan is outside"),
    ({"bu": 0.0}, r"field 'bu': uncertainty 0.0 is outside 0..180 degrees"),
    ({"bu": 200.0}, r"field 'bu': uncertainty 200.0 is outside 0..180"),
    ({"br": "NE"}, r"field 'br': str is not the expected float or nil"),
    ({"bu": True}, r"field 'bu': bool is not the expected float or nil"),
    ({"bu": None}, r"fields 'br'/'bu': 287.25 and None: both nil \(no bearing\) or both"),
])
def test_a_bad_bearing_field_is_named(changes, message):
    with pytest.raises(WireError, match=message):
        decode_frame(_packed(_raw() | changes))


def test_a_bearing_without_its_uncertainty_is_refused():
    raw = _raw()
    del raw["bu"]
    with pytest.raises(WireError, match=r"field 'bu': missing beside 'br'"):
        decode_frame(_packed(raw))


def test_the_encoder_refuses_a_bearing_the_decoder_refuses():
    with pytest.raises(WireError, match="field 'bu'"):
        encode_frame(dataclasses.replace(BEARING, bearing_uncertainty_deg=500.0))
    assert BEARING.gate == GATE_DOG
