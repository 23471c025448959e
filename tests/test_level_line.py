"""The analyzer writes each frame's ``level`` point as line protocol built directly
(``analyzer.store.level_line``); it must be the very text influxdb-client's ``Point`` makes of
``level_point`` with the ``implausible_time`` field, and refuse the same values with the same
message. Computed both ways over real frames and hostile variations."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import soundfile

from analyzer.errors import AnalyzerError
from analyzer.store import level_line, level_point
from sensor.frames import frames_from_samples
from sensor.wire import GATE_DOG, GATE_LEVELS, Frame, decode_frame, encode_frame
from tests.conftest import DEMO_RECORDING


@functools.cache
def demo_frames() -> tuple[Frame, ...]:
    """Six seconds of the demo recording with barking (70-76 s), through the wire."""
    audio, rate = soundfile.read(DEMO_RECORDING, dtype="float64", start=70 * 16000,
                                 frames=6 * 16000)
    return tuple(decode_frame(encode_frame(f))
                 for f in frames_from_samples(audio, rate, 100.0, "yard-1", 1_700_000_000 * 10**9))


def by_point(frame: Frame, score: float | None, implausible: bool) -> str:
    return str(level_point(frame, score).field("implausible_time", implausible)
               .to_line_protocol())


def variations() -> list[tuple[Frame, float | None, bool]]:
    rng = np.random.default_rng(7)
    cases: list[tuple[Frame, float | None, bool]] = []
    for frame in demo_frames():
        for score in (None, 0.0, 1.0, float(rng.random())):
            cases.append((frame, score, False))
        cases.append((frame, 0.5, True))
    first = demo_frames()[0]
    bands = first.bands_db
    cases += [
        (dataclasses.replace(first, gate=GATE_LEVELS), 0.25, False),
        (dataclasses.replace(first, gate=GATE_DOG, lceq_db=70.0, lzeq_db=-3.0), None, False),
        (dataclasses.replace(first, clock_step_ns=-180 * 10**9), 0.1, False),
        (dataclasses.replace(first, clock_step_ns=1), None, True),
        (dataclasses.replace(first, laeq_db=60.0, lafmax_db=1e22, lafmin_db=1e-7,
                             dc_offset=-0.0, percentile_window_s=10.0), 1e-5, False),
        (dataclasses.replace(first, device_id="a b,c=d\\"), 0.5, False),
        (dataclasses.replace(first, device_id="ends\\"), 0.5, False),
        (dataclasses.replace(first, calibration_date='2026-"12"\\01\n'), 0.5, False),
        (dataclasses.replace(first, calibration_date=""), None, False),
        (dataclasses.replace(first, under_range=True, clipped_samples=48000), 0.5, False),
        (dataclasses.replace(first, band_first_index=-20,
                             bands_db=np.linspace(-140.0, 210.0, bands.size)), 0.5, False),
        (dataclasses.replace(first, band_first_index=0,
                             bands_db=rng.normal(50, 30, 14).astype(np.float32)), 0.5, False),
        (dataclasses.replace(first, bands_db=bands.astype(np.float64) + 1e-9), 0.5, False),
    ]
    return cases


def test_the_level_line_is_the_text_point_makes_of_level_point() -> None:
    cases = variations()
    assert len(cases) > 40
    for frame, score, implausible in cases:
        assert level_line(frame, score, implausible) == by_point(frame, score, implausible)


@pytest.mark.parametrize("changes", [
    {"laeq_db": float("nan")},
    {"lafmin_db": float("inf")},
    {"full_scale_db": float("-inf")},
    {"gate": GATE_DOG, "lzeq_db": float("nan")},
    {"bands_db": np.array([40.0, float("nan"), 50.0], dtype=np.float32)},
], ids=["laeq", "lafmin", "full_scale", "lzeq", "band"])
def test_a_value_influxdb_would_drop_is_refused_with_the_same_message(
    changes: dict[str, object],
) -> None:
    frame = dataclasses.replace(demo_frames()[0], **changes)  # type: ignore[arg-type]
    with pytest.raises(AnalyzerError) as by_line:
        level_line(frame, 0.5, False)
    with pytest.raises(AnalyzerError) as by_point_:
        by_point(frame, 0.5, False)
    assert str(by_line.value) == str(by_point_.value)


def test_a_score_influxdb_would_drop_is_refused_with_the_same_message() -> None:
    frame = demo_frames()[0]
    with pytest.raises(AnalyzerError) as by_line:
        level_line(frame, float("nan"), False)
    with pytest.raises(AnalyzerError) as by_point_:
        by_point(frame, float("nan"), False)
    assert str(by_line.value) == str(by_point_.value)
