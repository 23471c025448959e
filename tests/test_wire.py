"""Wire format v4: round trip, the speech gate's three kinds of frame, the background statistics,
every kind of bad payload named precisely, v1 to v3 refused."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sensor.config import load_sensor_config
from sensor.errors import ConfigError, WireError
from sensor.frames import frames_from_samples
from sensor.wire import (
    EMBEDDING_SIZE,
    GATE_DOG,
    GATE_LEVELS,
    GATE_QUIET,
    GATE_SCORES,
    GATE_SPEECH,
    MAX_PATCHES,
    N_CLASSES,
    BandBackground,
    Frame,
    decode_frame,
    device_from_topic,
    encode_frame,
    frame_topic,
)
from tests.conftest import sine

# A tone is no dog: the gate would send it as a quiet second. Set to carry everything, it
# tests every field's round trip (the gates are tested below).
FRAME = dataclasses.replace(next(frames_from_samples(
    sine(1000.0, 0.1, 1.0, 48000), 48000, 120.0, device_id="dev-1",
    start_ns=1_700_000_000_000_000_000)), gate=GATE_DOG, background=None)
F16 = np.float16
# what stays on the sensor in every frame (wire v4): YAMNet's outputs behind the head's score
ON_THE_SENSOR = ("embeddings", "class_scores")
BACKGROUND = BandBackground(FRAME.capture_ns - 60 * 10**9, 42, -16,
                              np.linspace(20.0, 40.0, 30).astype(np.float32))


def _payload(**changes: object) -> bytes:
    raw = msgpack.unpackb(encode_frame(FRAME), raw=False)
    raw.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del raw[key]
    return msgpack.packb(raw, use_bin_type=True)


def test_round_trip_keeps_every_field_but_yamnets_outputs() -> None:
    decoded = decode_frame(encode_frame(FRAME))
    for field in dataclasses.fields(Frame):
        original, back = getattr(FRAME, field.name), getattr(decoded, field.name)
        if field.name in ON_THE_SENSOR:
            assert back.shape == (0, original.shape[1]), field.name
        elif isinstance(original, np.ndarray):
            # float16 on the wire: 0.0625 dB resolution up to 128 dB, 0.0005 under a score of 1
            np.testing.assert_allclose(back, original, atol=0.07, rtol=1e-3)
        else:
            assert back == original, field.name


def test_embeddings_and_class_scores_never_leave_the_sensor() -> None:
    assert FRAME.embeddings.shape == (2, EMBEDDING_SIZE)  # in memory, on the sensor
    assert FRAME.class_scores.shape == (2, N_CLASSES)
    raw = msgpack.unpackb(encode_frame(FRAME), raw=False)
    assert not {"emb", "ys"} & set(raw)
    decoded = decode_frame(encode_frame(FRAME))
    # one second, padded as YAMNet pads a clip (to 0.975 s + a whole 0.48 s hop): two patches,
    # each with the dog head's score computed on the sensor
    assert decoded.patch_head_scores.shape == (2,)
    np.testing.assert_array_equal(decoded.patch_head_scores,
                                  FRAME.patch_head_scores.astype(F16))
    np.testing.assert_array_equal(decoded.dog_steps, FRAME.dog_steps.astype(F16))
    assert list(decoded.patch_starts_ns - FRAME.capture_ns) == [0, 480_000_000]
    assert decoded.model_versions.startswith("dog-cnn-")
    assert "+head-dog-head-" in decoded.model_versions


def test_the_fine_tuned_dog_score_travels_one_per_patch_and_is_optional() -> None:
    assert FRAME.patch_dog_scores is not None  # the bundled sensor network has the tuned top
    decoded = decode_frame(encode_frame(FRAME))
    assert decoded.patch_dog_scores is not None
    np.testing.assert_array_equal(decoded.patch_dog_scores, FRAME.patch_dog_scores.astype(F16))
    assert decoded.patch_dog_scores.shape == (len(decoded.patch_head_scores),)
    # a sensor that runs YAMNet alone sends no 'dg': the frame decodes without it
    assert decode_frame(_payload(dg=None)).patch_dog_scores is None
    with pytest.raises(WireError, match="field 'dg': \\(1,\\) scores for 2 patches"):
        encode_frame(dataclasses.replace(FRAME, patch_dog_scores=np.zeros(1, np.float32)))


def test_v4_carries_no_spectrogram_finer_than_a_second() -> None:
    raw = msgpack.unpackb(encode_frame(FRAME), raw=False)
    assert "mel" not in raw and "mels" not in raw
    assert len(raw["bands"]) // 4 == len(FRAME.bands_db)  # one band spectrum per second


def test_a_dog_frame_is_compact() -> None:
    # v3 sent YAMNet's 2 x (1024 + 521) float16 values: 6.2 kB; v4 the levels, bands,
    # envelopes, 50 CNN steps and two patch scores
    assert len(encode_frame(FRAME)) < 700


@pytest.mark.parametrize(("version", "why"), [
    (2, "words and voices"), (3, "embeddings"),
])
def test_v2_and_v3_frames_are_refused_with_the_upgrade_message(version: int, why: str) -> None:
    raw = msgpack.unpackb(encode_frame(FRAME), raw=False)
    with pytest.raises(WireError, match=f"wire format v{version} is no longer accepted.*{why}"
                       ".*upgrade the sensor's software to wire format v4") as caught:
        decode_frame(msgpack.packb(raw | {"v": version}, use_bin_type=True))
    assert caught.value.reason == "version"


@pytest.mark.parametrize("gate", [GATE_SPEECH, GATE_QUIET])
def test_speech_and_quiet_seconds_both_leave_as_a_level_meters_display(gate: str) -> None:
    data = encode_frame(dataclasses.replace(FRAME, gate=gate))
    raw = msgpack.unpackb(data, raw=False)
    assert sorted(raw) == sorted([
        "v", "dev", "seq", "t", "sr", "n", "fs_db", "cal", "la", "lafmax", "lafmin",
        "lasmax", "l10", "l50", "l90", "pct_s", "clip", "dc", "under", "hop", "mv", "g"])
    assert raw["g"] == GATE_LEVELS  # the stream does not say whether someone spoke
    assert len(data) < 300  # v2 sent about 7 KB a second
    back = decode_frame(data)
    assert back.gate == GATE_LEVELS and back.laeq_db == pytest.approx(FRAME.laeq_db)
    # what was withheld reads as nothing found: no bands, no patch, a score of 0 each step,
    # LCeq and LZeq not measured, the second's LAeq and LAFmax held over its envelope blocks
    assert back.bands_db.size == 0 and back.patch_head_scores.size == 0
    assert back.dog_steps.size == FRAME.dog_steps.size and not back.dog_steps.any()
    assert math.isnan(back.lceq_db) and math.isnan(back.lzeq_db)
    np.testing.assert_allclose(back.laeq_blocks_db, [FRAME.laeq_db] * 2, atol=1e-4)
    np.testing.assert_allclose(back.laf_blocks_db, [FRAME.lafmax_db] * 2, atol=1e-4)


def test_a_scores_frame_carries_the_dog_scores_and_a_level_meters_display() -> None:
    patches = FRAME.patch_head_scores.size
    assert patches  # the second has YAMNet patches to score
    frame = dataclasses.replace(FRAME, gate=GATE_SCORES,
                                patch_dog_scores=np.linspace(0.2, 0.9, patches, dtype=np.float32),
                                bearing_deg=120.0, bearing_uncertainty_deg=10.0,
                                bearing_estimated=True)
    data = encode_frame(frame)
    raw = msgpack.unpackb(data, raw=False)
    assert sorted(raw) == sorted([
        "v", "dev", "seq", "t", "sr", "n", "fs_db", "cal", "la", "lafmax", "lafmin",
        "lasmax", "l10", "l50", "l90", "pct_s", "clip", "dc", "under", "hop", "mv", "g",
        "dog_s", "p0", "pd", "dg"])  # no spectrum, no envelope, no bearing
    assert raw["g"] == GATE_SCORES
    back = decode_frame(data)
    assert back.gate == GATE_SCORES and back.laeq_db == pytest.approx(FRAME.laeq_db)
    np.testing.assert_array_equal(back.dog_steps, FRAME.dog_steps.astype(F16))
    np.testing.assert_array_equal(back.patch_head_scores, FRAME.patch_head_scores.astype(F16))
    assert back.patch_dog_scores is not None
    np.testing.assert_array_equal(back.patch_dog_scores, frame.patch_dog_scores.astype(F16))
    np.testing.assert_array_equal(back.patch_starts_ns, FRAME.patch_starts_ns)
    # what was withheld reads as in a "levels" frame
    assert back.bands_db.size == 0 and back.embeddings.shape == (0, EMBEDDING_SIZE)
    assert math.isnan(back.lceq_db) and math.isnan(back.lzeq_db)
    assert back.bearing_deg is None and not back.bearing_estimated
    np.testing.assert_allclose(back.laeq_blocks_db, [FRAME.laeq_db] * 2, atol=1e-4)
    np.testing.assert_allclose(back.laf_blocks_db, [FRAME.lafmax_db] * 2, atol=1e-4)


@pytest.mark.parametrize(("extra", "message"), [
    ({"bands": b"\0\0\0\0"}, "field(s) bands: not sent in a 'scores' frame"),
    ({"laeq_s": b"\0\0"}, "field(s) laeq_s: not sent in a 'scores' frame"),
    ({"br": 10.0, "bu": 5.0}, "field(s) br, bu: not sent in a 'scores' frame"),
    ({"pd": None}, "missing field(s): pd"),
    ({"dog_s": np.full(50, 2.0, "<f2").tobytes()}, "field 'dog_s': score 2.0 at index 0"),
])
def test_a_scores_frame_with_a_spectrum_or_without_its_scores_is_refused(
        extra: dict[str, object], message: str) -> None:
    raw = msgpack.unpackb(encode_frame(dataclasses.replace(FRAME, gate=GATE_SCORES)), raw=False)
    raw.update(extra)
    for key in [k for k, v in extra.items() if v is None]:
        del raw[key]
    with pytest.raises(WireError, match=re.escape(message)):
        decode_frame(msgpack.packb(raw, use_bin_type=True))


@pytest.mark.parametrize("gate", [GATE_DOG, GATE_QUIET, GATE_SCORES])
def test_the_background_statistics_travel_in_any_frame(gate: str) -> None:
    frame = dataclasses.replace(FRAME, gate=gate, background=BACKGROUND)
    back = decode_frame(encode_frame(frame)).background
    assert back is not None
    assert (back.start_ns, back.seconds, back.first_index) == (
        BACKGROUND.start_ns, 42, -16)
    np.testing.assert_array_equal(back.bands_db, BACKGROUND.bands_db)


@pytest.mark.parametrize(("changes", "message"), [
    ({"bg_n": None}, "field(s) bg_n: missing beside bg_t, bg_b0, bg"),
    ({"bg_n": 0}, "field 'bg_n': 0 seconds is outside 1..3600"),
    ({"bg_t": FRAME.capture_ns + 1}, "field 'bg_t'"),
    ({"bg": np.full(3, np.nan, "<f4").tobytes()}, "field 'bg': contains NaN"),
    ({"bg_b0": 40}, "field 'bg_b0': band index 40 is out of range"),
    ({"bg": "x"}, "field 'bg': str is not the expected bytes"),
])
def test_bad_background_statistics_are_named(changes: dict[str, object], message: str) -> None:
    raw = msgpack.unpackb(encode_frame(dataclasses.replace(FRAME, background=BACKGROUND)),
                          raw=False)
    raw.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del raw[key]
    with pytest.raises(WireError, match=re.escape(message)):
        decode_frame(msgpack.packb(raw, use_bin_type=True))


@pytest.mark.parametrize(("extra", "message"), [
    ({"bands": b"\0\0\0\0"}, "field(s) bands: not sent in a 'levels' frame"),
    ({"lc": 40.0}, "field(s) lc: not sent in a 'levels' frame"),
    ({"pd": b""}, "field(s) pd: not sent in a 'levels' frame"),
    ({"g": "quiet"}, "field 'g': 'quiet' is not one of dog, scores, levels"),
])
def test_a_field_the_gate_withholds_or_an_unknown_gate_is_refused(
        extra: dict[str, object], message: str) -> None:
    raw = msgpack.unpackb(encode_frame(dataclasses.replace(FRAME, gate=GATE_SPEECH)), raw=False)
    with pytest.raises(WireError, match=re.escape(message)):
        decode_frame(msgpack.packb(raw | extra, use_bin_type=True))


def test_a_v1_frame_is_refused_with_the_upgrade_message() -> None:
    raw = msgpack.unpackb(encode_frame(FRAME), raw=False)
    for key in ("dog_s", "p0", "pd", "mv"):
        del raw[key]
    v1 = raw | {"v": 1, "mels": 64, "mel": np.zeros((50, 64), F16).tobytes()}
    with pytest.raises(WireError, match="wire format v1 is no longer accepted.*upgrade the "
                       "sensor's software to wire format v4") as caught:
        decode_frame(msgpack.packb(v1, use_bin_type=True))
    assert caught.value.reason == "version"


def test_envelopes_travel_one_value_per_half_second_block() -> None:
    raw = msgpack.unpackb(encode_frame(FRAME), raw=False)
    assert raw["env_hop"] == 0.5
    assert len(raw["dog_s"]) // 2 == 50  # the dog score keeps its 20 ms steps
    assert len(raw["laeq_s"]) // 2 == len(raw["laf_s"]) // 2 == 2


def test_decoded_envelopes_hold_each_blocks_value_over_its_steps() -> None:
    decoded = decode_frame(_payload(laeq_s=np.array([40.0, 60.0], F16).tobytes(),
                                    laf_s=np.array([45.0, 70.0], F16).tobytes()))
    np.testing.assert_array_equal(decoded.laeq_steps_db, [40.0] * 25 + [60.0] * 25)
    np.testing.assert_array_equal(decoded.laf_steps_db, [45.0] * 25 + [70.0] * 25)


def test_a_20_ms_envelope_is_refused() -> None:
    # G's first v2 sent laeq_s and laf_s per 20 ms step, which carries speech's rhythm
    per_step = np.full(50, 60.0, F16).tobytes()
    with pytest.raises(WireError, match="field 'laeq_s': 50 values, expected 2"):
        decode_frame(_payload(laeq_s=per_step, laf_s=per_step))


def test_encoding_refuses_an_envelope_finer_than_half_a_second() -> None:
    fine = dataclasses.replace(FRAME, envelope_hop_s=0.02,
                               laeq_blocks_db=np.full(50, 60.0, np.float32),
                               laf_blocks_db=np.full(50, 60.0, np.float32))
    with pytest.raises(WireError, match="field 'env_hop': 0.02 s is outside 0.5..4 s"):
        encode_frame(fine)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"v": 5}, "schema version 5 is not supported (expected 4)"),
        ({"seq": None}, "missing field(s): seq"),
        ({"extra": 1}, "unknown field(s): extra"),
        ({"seq": "7"}, "field 'seq'"),
        ({"seq": True}, "field 'seq'"),
        ({"dev": "Bad Id"}, "field 'dev'"),
        ({"sr": 22050}, "field 'sr'"),
        ({"la": float("nan")}, "field 'la'"),
        ({"bands": b"\x00\x00\x80"}, "field 'bands'"),
        ({"mel": b"\x00\x00"}, "unknown field(s): mel"),
        ({"mels": 64}, "unknown field(s): mels"),
        ({"dog_s": None}, "missing field(s): dog_s"),
        ({"dog_s": np.zeros(51, F16).tobytes()}, "field 'laeq_s': 2 values, expected 3"),
        ({"dog_s": np.zeros(0, F16).tobytes()}, "field 'dog_s': 0 steps is out of range"),
        ({"env_hop": None}, "missing field(s): env_hop"),
        ({"env_hop": "0.5"}, "field 'env_hop': str is not the expected float or int"),
        ({"env_hop": 0.02}, "field 'env_hop': 0.02 s is outside 0.5..4 s (a finer envelope "
                            "carries speech)"),
        ({"env_hop": float("nan")}, "field 'env_hop': nan s is outside"),
        ({"env_hop": 0.51}, "field 'env_hop': 0.51 s is not a whole number of 'hop' (0.02 s)"),
        ({"laeq_s": np.zeros(3, F16).tobytes()}, "field 'laeq_s': 3 values, expected 2"),
        ({"laeq_s": np.full(2, np.inf, F16).tobytes()}, "field 'laeq_s': contains NaN"),
        ({"laf_s": np.zeros(1, F16).tobytes()}, "field 'laf_s': 1 values, expected 2"),
        ({"dog_s": np.full(50, np.nan, F16).tobytes()}, "field 'dog_s': contains NaN"),
        ({"dog_s": np.full(50, 1.5, F16).tobytes()}, "field 'dog_s': score 1.5 at index 0 "
                                                     "is outside 0..1"),
        ({"dog_s": np.full(50, -0.5, F16).tobytes()}, "field 'dog_s': score -0.5"),
        ({"dog_s": "x"}, "field 'dog_s': str is not the expected bytes"),
        ({"pd": np.zeros(3, F16).tobytes()[:5]}, "field 'pd': 5 bytes is not a whole number"),
        ({"pd": np.full(2, 1.5, F16).tobytes()}, "field 'pd': score 1.5 at index 0 is outside"),
        ({"pd": np.full(2, np.inf, F16).tobytes()}, "field 'pd': contains NaN"),
        ({"pd": np.zeros(MAX_PATCHES + 1, F16).tobytes()},
         "field 'pd': 9 patches exceeds the limit of 8"),
        ({"pd": None}, "missing field(s): pd"),
        ({"emb": np.zeros((2, 1024), F16).tobytes()}, "unknown field(s): emb"),
        ({"p0": "0"}, "field 'p0': str is not the expected int"),
        ({"p0": 0}, "field 'p0': 0 ns is not within 2 s of the frame's capture time"),
        ({"p0": None}, "missing field(s): p0"),
        ({"p0": 2**64 - 1}, "field 'p0'"),
        ({"mv": ""}, "field 'mv': '' is not 1 to 128 printable characters"),
        ({"mv": "cnn\n"}, "field 'mv'"),
        ({"mv": 3}, "field 'mv': int is not the expected str"),
        ({"laf_s": b""}, "field 'laf_s'"),
        ({"dg": np.zeros(3, F16).tobytes()}, "field 'dg': 3 values, expected 2"),
        ({"dg": np.full(2, 1.5, F16).tobytes()}, "field 'dg': score 1.5 at index 0 is outside"),
        ({"dg": np.full(2, np.nan, F16).tobytes()}, "field 'dg': contains NaN"),
        ({"dg": [0.5, 0.5]}, "field 'dg': list is not the expected bytes"),
    ],
)
def test_bad_field_is_named(changes: dict[str, object], message: str) -> None:
    with pytest.raises(WireError, match=message.replace("(", r"\(").replace(")", r"\)")):
        decode_frame(_payload(**changes))


def test_not_msgpack_is_rejected() -> None:
    with pytest.raises(WireError, match="not valid msgpack"):
        decode_frame(b"\xc1\xc1\xc1")


def test_oversized_payload_is_rejected_before_parsing() -> None:
    with pytest.raises(WireError, match="exceeds the limit"):
        decode_frame(b"\x00" * 70_000)


def test_topic_names_kind_and_device() -> None:
    assert device_from_topic(frame_topic("dev-1")) == ("frames", "dev-1")
    with pytest.raises(WireError, match="not a valid device id"):
        device_from_topic("barkwatch/v1/frames/Dev 1")
    with pytest.raises(WireError, match="not of the form"):
        device_from_topic("barkwatch/v2/frames/dev-1")


@settings(max_examples=40, deadline=None)
@given(
    seq=st.integers(0, 2**63 - 1),
    capture_ns=st.integers(0, 2**63 - 10**10),  # p0 leaves room for 8 patches
    levels=st.lists(st.floats(-20.0, 140.0), min_size=4, max_size=4),
    n_bands=st.integers(1, 43),
)
def test_round_trip_property(seq: int, capture_ns: int, levels: list[float], n_bands: int) -> None:
    frame = dataclasses.replace(
        FRAME, seq=seq, capture_ns=capture_ns, patch_start_ns=capture_ns, laeq_db=levels[0],
        lceq_db=levels[1],
        lzeq_db=levels[2], lafmax_db=levels[3],
        bands_db=np.linspace(10, 90, n_bands, dtype=np.float32),
    )
    back = decode_frame(encode_frame(frame))
    assert (back.seq, back.capture_ns, back.laeq_db, back.lafmax_db) == (
        seq, capture_ns, levels[0], levels[3])
    np.testing.assert_array_equal(back.bands_db, frame.bands_db)


def test_extra_keys_of_bytes_and_text_are_named_as_unknown_fields() -> None:
    # Issue 27: sorting a bytes key against a text key raised TypeError in the analyzer.
    raw = msgpack.unpackb(encode_frame(FRAME), raw=False)
    raw[b"x"] = b"\x00" * 10
    raw["y"] = {"nested": [1, [2, {"deep": b"z"}]]}
    with pytest.raises(WireError, match=r"unknown field\(s\): b'x', y"):
        decode_frame(msgpack.packb(raw, use_bin_type=True))


@pytest.mark.parametrize(
    ("key", "message"),
    [(7, "int is not allowed for map key"),
     ("\n" * 3, r"unknown field\(s\): '\\n\\n\\n'"),
     ("k" * 5000, r"unknown field\(s\): 'kkkk.*\.\.\. \(5002 characters\)"),
     (b"seq", r"unknown field\(s\): b'seq'")],
)
def test_an_extra_key_of_any_type_is_a_wire_error_naming_it_briefly(
    key: object, message: str
) -> None:
    raw = msgpack.unpackb(encode_frame(FRAME), raw=False)
    raw[key] = 1
    with pytest.raises(WireError, match=message) as caught:
        decode_frame(msgpack.packb(raw, use_bin_type=True))
    assert len(str(caught.value)) < 200


def test_a_calibration_date_of_58000_characters_is_refused_naming_its_length_and_limit() -> None:
    with pytest.raises(WireError, match="field 'cal': 58000 characters exceeds the limit of 64"):
        decode_frame(_payload(cal="2026-12-01" + "x" * 57_990))
    with pytest.raises(WireError, match="field 'cal': 58000 characters"):
        encode_frame(dataclasses.replace(FRAME, calibration_date="x" * 58_000))


def test_real_calibration_dates_fit_and_a_control_character_does_not() -> None:
    for date in ("", "2026-12-01", "2026-12-01T10:15:30.123456789+05:30", "d" * 64):
        frame = dataclasses.replace(FRAME, calibration_date=date)
        assert decode_frame(encode_frame(frame)).calibration_date == date
    with pytest.raises(WireError, match="field 'cal': .* contains a control character"):
        decode_frame(_payload(cal="2026-12-01\nla=0"))


def test_a_device_id_with_a_trailing_newline_is_refused_in_frames_topics_and_sensor_config(
    tmp_path: Path,
) -> None:
    # `$` with re.match also matches before a final newline.
    with pytest.raises(WireError, match=r"field 'dev': 'dev-1\\n' is not a valid device id"):
        decode_frame(_payload(dev="dev-1\n"))
    with pytest.raises(WireError, match="not a valid device id"):
        device_from_topic("barkwatch/v1/frames/dev-1\n")
    with pytest.raises(WireError, match="field 'dev'"):
        encode_frame(dataclasses.replace(FRAME, device_id="dev-1\n"))
    config = tmp_path / "sensor.toml"
    config.write_text('device_id = "dev-1\\n"\n')
    with pytest.raises(ConfigError, match="device_id"):
        load_sensor_config(str(config))


def test_the_encoder_refuses_what_the_decoder_refuses() -> None:
    with pytest.raises(WireError, match="field 'la'"):
        encode_frame(dataclasses.replace(FRAME, laeq_db=float("nan")))
    with pytest.raises(WireError, match="field 'pd': score 2.0 at index 0 is outside 0..1"):
        encode_frame(dataclasses.replace(FRAME, patch_head_scores=np.full(2, 2.0, np.float32)))
    with pytest.raises(WireError, match="field 'dog_s': score 1.5"):
        encode_frame(dataclasses.replace(FRAME, dog_steps=np.full(50, 1.5, np.float32)))
    with pytest.raises(WireError, match="field 'seq'"):
        encode_frame(dataclasses.replace(FRAME, seq=2**64))


def test_a_sensor_config_with_a_calibration_date_no_frame_can_carry_is_refused(
    tmp_path: Path,
) -> None:
    config = tmp_path / "sensor.toml"
    config.write_text(f'device_id = "dev-1"\n[calibration]\ndate = "{"x" * 65}"\n')
    with pytest.raises(ConfigError, match="'calibration.date': 65 characters; .* at most 64"):
        load_sensor_config(str(config))
    config.write_text('device_id = "dev-1"\n[calibration]\ndate = "2026-12-01T10:15:30Z"\n')
    assert load_sensor_config(str(config)).calibration.date == "2026-12-01T10:15:30Z"
