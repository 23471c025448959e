"""A sensor clock step (NTP correcting the wall clock) is flagged on the frame, on the wire
as the optional ``cstep`` field, and never moves capture time (which counts samples)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import msgpack
import pytest

from analyzer.config import AnalyzerConfig
from analyzer.deploy.services import Services
from analyzer.store.influx import InfluxClient, InfluxSettings
from sensor.capture import AudioBlock
from sensor.clock import ClockStepDetector
from sensor.config import MqttSettings
from sensor.errors import WireError
from sensor.frames import FrameBuilder, frames_from_samples
from sensor.node import NodeStats, measure_into_outbox
from sensor.outbox import Outbox
from sensor.wire import decode_frame, encode_frame, frame_topic
from tests.conftest import publish_through_analyzer, sine

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


class SteppingClock:
    """A wall clock that runs with a monotonic one (1 s per reading) and jumps by ``step_ns``
    at its ``step_at``-th reading, as NTP stepping the system clock would."""

    def __init__(self, step_ns: int, step_at: int, slew_ns_per_s: int = 0) -> None:
        self.readings = 0
        self.step_ns, self.step_at, self.slew = step_ns, step_at, slew_ns_per_s

    def monotonic_ns(self) -> int:
        return self.readings * 10**9

    def wall_ns(self) -> int:
        self.readings += 1
        stepped = self.step_ns if self.readings > self.step_at else 0
        return 1_780_000_000 * 10**9 + self.monotonic_ns() + stepped + self.readings * self.slew


def test_a_step_of_minutes_is_reported_once_with_its_size_and_sign() -> None:
    clock = SteppingClock(step_ns=-MINUTES_3_NS, step_at=5)
    detector = ClockStepDetector(clock.wall_ns, clock.monotonic_ns)
    assert [detector.step_ns() for _ in range(10)] == [0] * 4 + [-MINUTES_3_NS] + [0] * 5
    assert detector.steps == 1


def test_a_slew_at_ntps_fastest_rate_is_never_a_step() -> None:
    # 500 ppm, the most a kernel slews: 0.5 ms per second, 1.8 s over an hour.
    clock = SteppingClock(step_ns=0, step_at=0, slew_ns_per_s=500_000)
    detector = ClockStepDetector(clock.wall_ns, clock.monotonic_ns)
    assert not any(detector.step_ns() for _ in range(3600))


def test_a_replay_faster_than_real_time_is_no_step() -> None:
    detector = ClockStepDetector()  # the real clocks; frames come far faster than 1 per s
    assert not any(detector.step_ns() for _ in range(1000))


def test_frames_measured_across_a_step_stay_in_sample_order_and_the_step_is_flagged(
    tmp_path: Path,
) -> None:
    start_ns = 1_780_351_200_000_000_000
    builder = FrameBuilder("step-1", 16000, 100.0, start_ns=start_ns)
    outbox, stats = Outbox(tmp_path / "outbox.sqlite"), NodeStats()
    # Reading 1 is the detector's own, readings 2-4 frames 0-2: frame 3 is the first after it.
    clock = SteppingClock(step_ns=MINUTES_3_NS, step_at=4)
    blocks = [AudioBlock(samples=sine(440.0, 0.05, 1.0, 16000)) for _ in range(8)]
    measure_into_outbox(blocks, builder, outbox, stats, threading.Event(),
                        clock=ClockStepDetector(clock.wall_ns, clock.monotonic_ns))
    frames = [decode_frame(payload) for _, payload in outbox.peek(100)]
    assert [f.seq for f in frames] == list(range(8))
    assert [f.capture_ns for f in frames] == [start_ns + i * 10**9 for i in range(8)]
    assert [f.clock_step_ns for f in frames] == [0, 0, 0, MINUTES_3_NS, 0, 0, 0, 0]
    assert stats.clock_steps == 1


def test_the_analyzer_stores_the_step_with_its_frame_and_counts_it(services: Services) -> None:
    start_ns = 1_780_351_200_000_000_000
    frames = list(frames_from_samples(sine(1000.0, 0.1, 4.0, 16000), 16000, 100.0,
                                      device_id="step-2", start_ns=start_ns))
    frames[2] = dataclasses.replace(frames[2], clock_step_ns=-MINUTES_3_NS)
    config = AnalyzerConfig(
        max_frame_age_s=315_360_000.0,  # the frames are stamped in June 2026
        mqtt=MqttSettings(port=services.broker.port),
        influx=InfluxSettings(url=services.influx.url),
    )
    analyzer = publish_through_analyzer(config, frame_topic("step-2"),
                                        [encode_frame(f) for f in frames], stored=4)
    assert analyzer.counters.clock_steps == 1
    rows = InfluxClient(InfluxSettings(url=services.influx.url)).query(
        "SELECT seq, clock_step_ns FROM level WHERE device = 'step-2'")[0]["values"]
    assert [(row[0], row[1], row[2]) for row in rows] == [
        (start_ns + i * 10**9, i, -MINUTES_3_NS if i == 2 else None) for i in range(4)]
