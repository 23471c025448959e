"""The analyzer trusts no payload: inconsistent frames are dropped, implausible capture times
are stored flagged and unscored (see analyzer/ingest/plausibility.py for the decision)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest

from analyzer.config import AnalyzerConfig, InfluxSettings
from analyzer.deploy.services import Services
from analyzer.ingest.plausibility import (
    frame_problem,
    level_problem,
    measurable_range_db,
    shape_problem,
    time_problem,
)
from analyzer.offline.analysis import frames_of_file
from analyzer.store.influx import InfluxClient
from sensor.config import MqttSettings
from sensor.frames import frames_from_samples
from sensor.wire import GATE_DOG, Frame, encode_frame, frame_topic
from tests.conftest import publish_through_analyzer, sine

DAY_S = 86400.0
NOW_NS = 1_790_000_000_000_000_000


def _frames(count: int, start_ns: int, device: str = "dev-p") -> list[Frame]:
    """Frames of a tone, sent whole (as dog frames: every field to check), without background
    statistics (which would date from the original capture time)."""
    return [dataclasses.replace(f, gate=GATE_DOG, background=None) for f in frames_from_samples(
        sine(1000.0, 0.1, float(count), 48000), 48000, 100.0, device_id=device,
        start_ns=start_ns)]


FRAME = _frames(1, NOW_NS)[0]


@pytest.mark.parametrize(
    ("offset_s", "problem"),
    [(0.0, None), (-7 * DAY_S + 1, None), (299.0, None),
     (301.0, "301 s ahead of the analyzer's clock"), (-8 * DAY_S, "8.0 days old"),
     (-NOW_NS / 1e9, "days old")],
)
def test_capture_time_must_lie_within_the_window_around_the_analyzers_clock(
    offset_s: float, problem: str | None
) -> None:
    found = time_problem(NOW_NS + round(offset_s * 1e9), NOW_NS, 7 * DAY_S, 300.0)
    assert found == problem if problem is None else problem in (found or "")


def test_a_sensors_own_frame_is_consistent() -> None:
    assert frame_problem(FRAME) is None
    assert shape_problem(FRAME, (50, FRAME.hop_s)) is None


@pytest.mark.parametrize(
    ("changes", "named"),
    [({"full_scale_db": float("nan")}, "'fs_db'"),
     ({"full_scale_db": 20.0}, "'fs_db'"),
     ({"band_first_index": 0}, "past the last IEC 61260-1 band"),
     ({"sample_rate": 16000, "n_samples": 16000}, "Nyquist"),
     ({"hop_s": 0.05}, "cover"),
     ({"n_samples": 96000}, "cover")],
)
def test_an_inconsistent_frame_is_named(changes: dict[str, object], named: str) -> None:
    assert named in (frame_problem(dataclasses.replace(FRAME, **changes)) or "")  # type: ignore[arg-type]


def test_a_step_layout_other_than_the_detectors_is_named() -> None:
    assert "the detector takes 32" in (shape_problem(FRAME, (32, 0.02)) or "")


def test_implausible_times_are_kept_at_arrival_unscored_inconsistent_frames_dropped(
    services: Services,
) -> None:
    now_ns = time.time_ns()
    good = _frames(4, now_ns - 10 * 10**9)
    future = _frames(1, now_ns + round(DAY_S * 1e9))[0]
    epoch = _frames(1, 0)[0]  # a Raspberry Pi that booted without a clock
    bad_bands = dataclasses.replace(good[0], seq=50, band_first_index=5)
    # 25 scores of 0.04 s: well-formed on the wire, but not the detector's 20 ms steps
    bad_steps = dataclasses.replace(good[0], seq=51, hop_s=0.04,
                                    dog_steps=np.zeros(25, np.float32),
                                    envelope_hop_s=1.0,
                                    laeq_blocks_db=good[0].laeq_blocks_db[:1],
                                    laf_blocks_db=good[0].laf_blocks_db[:1])
    payloads = [encode_frame(f) for f in good[:2]]
    payloads += [encode_frame(dataclasses.replace(future, seq=20)),
                 encode_frame(dataclasses.replace(epoch, seq=21)),
                 encode_frame(bad_bands), encode_frame(bad_steps)]
    payloads += [encode_frame(f) for f in good[2:]]
    config = AnalyzerConfig(
        mqtt=MqttSettings(port=services.broker.port, keepalive_s=5, reconnect_max_s=1),
        influx=InfluxSettings(url=services.influx.url, retry_max_s=0.5, timeout_s=2.0),
    )
    analyzer = publish_through_analyzer(config, frame_topic("dev-p"), payloads, stored=6)
    assert (analyzer.counters.implausible_time, analyzer.counters.malformed) == (2, 2)
    series = InfluxClient(InfluxSettings(url=services.influx.url)).query(
        "SELECT seq, implausible_time, max_dog_score FROM level WHERE device = 'dev-p'"
    )[0]["values"]
    rows = {seq: (flag, score) for _, seq, flag, score in series}
    assert sorted(rows) == [0, 1, 2, 3]  # never at an implausible time (issue 32, item 3)
    assert all(rows[seq][0] is False and rows[seq][1] is not None for seq in range(4))
    kept = InfluxClient(InfluxSettings(url=services.influx.url)).query(
        "SELECT seq, capture_ns FROM implausible_frame WHERE device = 'dev-p'")[0]["values"]
    assert sorted((seq, capture_ns) for _, seq, capture_ns in kept) == [
        (20, future.capture_ns), (21, epoch.capture_ns)]


# The sensor's own frame of a real recording: a 0.45 s bark padded with digital silence, so
# its second half-second block is mostly the sensor's floor, full_scale_db - 200 dB.
BARK_FRAME = frames_of_file(Path(__file__).parent / "data" / "lugaru_bark2.flac", 120.0)[1][0]


def test_a_real_bark_and_the_digital_silence_after_it_are_measurable_levels() -> None:
    # the bark's tail and the silence after it, power-averaged over the block (wire v2)
    assert 120.0 - 200.0 < float(BARK_FRAME.laeq_blocks_db[1]) < 0.0
    assert BARK_FRAME.laeq_db > 100.0
    assert level_problem(BARK_FRAME) is None
    assert frame_problem(BARK_FRAME) is None


def _with_level(field: str, index: int | None, value: float) -> Frame:
    if index is None:
        return dataclasses.replace(BARK_FRAME, **{field: value})  # type: ignore[arg-type]
    array = np.array(getattr(BARK_FRAME, field), dtype=np.float32)
    array.flat[index] = value
    return dataclasses.replace(BARK_FRAME, **{field: array})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "index", "value", "named"),
    [("bands_db", 4, 3e38, "field 'bands': level 3e+38 dB at index 4 (1 of 25 values)"),
     ("bands_db", 0, float("nan"), "field 'bands': level nan dB at index 0"),
     ("laeq_blocks_db", 1, -81.0, "field 'laeq_s': level -81 dB at index 1"),
     ("laf_blocks_db", 0, 130.5, "field 'laf_s': level 130.5 dB at index 0"),
     ("laeq_db", None, 180.0, "field 'la': level 180 dB"),
     ("laf90_db", None, -1e30, "field 'l90': level -1e+30 dB"),
     ("lafmax_db", None, float("inf"), "field 'lafmax': level inf dB")],
)
def test_a_level_the_microphones_calibration_cannot_measure_is_named(
    field: str, index: int | None, value: float, named: str
) -> None:
    problem = frame_problem(_with_level(field, index, value)) or ""
    assert named in problem
    assert "outside -80.5..130 dB, what a full scale of 120 dB can measure" in problem


def test_levels_at_the_edges_of_what_a_calibration_can_measure_pass() -> None:
    assert measurable_range_db(120.0) == (-80.5, 130.0)
    assert frame_problem(_with_level("bands_db", 0, 130.0)) is None
    assert frame_problem(_with_level("laeq_blocks_db", 0, -80.5)) is None
    assert frame_problem(_with_level("laeq_db", None, 130.0)) is None


def test_a_frame_with_band_levels_of_3e38_db_is_counted_malformed_and_never_stored(
    services: Services,
) -> None:
    frames = _frames(3, time.time_ns() - 10 * 10**9, device="dev-loud")
    absurd_bands = np.array(frames[1].bands_db, dtype=np.float32)
    absurd_bands[5] = 3e38
    payloads = [encode_frame(frames[0]),
                encode_frame(dataclasses.replace(frames[1], bands_db=absurd_bands)),
                encode_frame(frames[2])]
    config = AnalyzerConfig(
        mqtt=MqttSettings(port=services.broker.port, keepalive_s=5, reconnect_max_s=1),
        influx=InfluxSettings(url=services.influx.url, retry_max_s=0.5, timeout_s=2.0),
    )
    analyzer = publish_through_analyzer(config, frame_topic("dev-loud"), payloads, stored=2)
    assert analyzer.counters.malformed == 1
    series = InfluxClient(InfluxSettings(url=services.influx.url)).query(
        "SELECT * FROM level WHERE device = 'dev-loud'"
    )[0]
    rows = [dict(zip(series["columns"], values, strict=True)) for values in series["values"]]
    assert sorted(row["seq"] for row in rows) == [0, 2]
    levels = [value for row in rows for key, value in row.items()
              if key.endswith("_db") and isinstance(value, float)]
    assert levels and max(levels) < 200.0
