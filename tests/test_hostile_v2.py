"""Hostile input on wire v2 (issue 32) against the live analyzer, with a real Mosquitto and
InfluxDB: times that would exhaust InfluxDB, drop points that amplify, frames that overwrite
each other, retained frames taken again."""

from __future__ import annotations

import dataclasses
import json
import time

import paho.mqtt.client as mqtt

from analyzer.deploy.services import Services
from analyzer.ingest.inbox import Inbox, InboxLimits
from analyzer.ingest.service import FORGETS_PER_PASS, MAX_DROP_POINTS, Analyzer
from analyzer.store.influx import InfluxClient, InfluxSettings
from sensor.wire import encode_frame, frame_topic, heartbeat_topic
from tests.conftest import wait_until
from tests.test_end_to_end import analyzer_config
from tests.test_hostile_messages import Publisher, frames_of, run_analyzer

NS = 1_000_000_000
WEEK_NS = 7 * 86400 * NS


def _query(services: Services, text: str) -> list[list[object]]:
    series = InfluxClient(InfluxSettings(url=services.influx.url)).query(text)
    return series[0]["values"] if series else []


def _shards(services: Services) -> int:
    series = InfluxClient(InfluxSettings(url=services.influx.url)).query("SHOW SHARDS",
                                                                          database="")
    return sum(len(s.get("values", [])) for s in series if s.get("name") == "barkwatch")


def test_frames_and_heartbeats_dated_over_centuries_make_no_shards_and_are_kept(
    services: Services,
) -> None:
    config = dataclasses.replace(analyzer_config(services), max_frame_age_s=604800.0)
    now_ns = time.time_ns()
    good = [f.retimed(now_ns - (30 - i) * NS) for i, f in enumerate(frames_of("good-1", 3))]
    hostile = [dataclasses.replace(f, seq=i).retimed(now_ns + (i - 20) * 52 * WEEK_NS)
               for i, f in enumerate(frames_of("wild-1", 1) * 40)]  # up to 20 years away
    analyzer = run_analyzer(config)
    publisher = Publisher(config)
    try:
        for frame in hostile:
            publisher.publish(frame_topic("wild-1"), encode_frame(frame))
        for beat_ns in (1, 7_258_118_400 * NS, now_ns):  # 1970, 2200, now
            publisher.publish(heartbeat_topic("wild-1"), json.dumps(
                {"device_id": "wild-1", "time_ns": beat_ns, "uptime_s": 1.0}).encode())
        for frame in good:
            publisher.publish(frame_topic("good-1"), encode_frame(frame))
        wait_until(lambda: analyzer.counters.frames_stored == 43
                   and analyzer.counters.heartbeats == 3, timeout_s=60, what="every message")
    finally:
        publisher.close()
        analyzer.stop()
    assert analyzer.counters.implausible_time == 39  # the one at i = 20 is now
    assert analyzer.counters.heartbeat_implausible_time == 2
    assert _shards(services) <= 2  # this week's (and last week's): never one per claimed week
    kept = _query(services, "SELECT capture_ns, seq FROM implausible_frame "
                            "WHERE device = 'wild-1'")
    assert sorted(int(str(row[2])) for row in kept) == [i for i in range(40) if i != 20]
    assert {row[1] for row in kept} == {f.capture_ns for f in hostile if f.seq != 20}
    beats = _query(services, "SELECT implausible_time, claimed_time_ns FROM sensor_health")
    assert sorted((row[1], row[2]) for row in beats) == sorted(
        [(True, 1), (True, 7_258_118_400 * NS), (False, None)])
    assert len(_query(services, "SELECT laeq_db FROM level WHERE device = 'good-1'")) == 3


def _rows(services: Services, text: str) -> list[dict[str, object]]:
    series = InfluxClient(InfluxSettings(url=services.influx.url)).query(text)
    if not series:
        return []
    columns = series[0]["columns"]
    return [dict(zip(columns, values, strict=True)) for values in series[0]["values"]]


def test_a_qos0_burst_on_distinct_topics_makes_a_bounded_number_of_drop_points_once(
    services: Services,
) -> None:
    config = analyzer_config(services)  # stats every second
    analyzer = Analyzer(config)
    analyzer._inbox = Inbox(InboxLimits(max_messages=20, device_qos0_messages=2))  # drops soon
    analyzer.start()
    wait_until(analyzer.connected.is_set, what="the analyzer to connect")
    flooder = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
    flooder.max_queued_messages_set(0)
    flooder.connect(config.mqtt.host, config.mqtt.port)
    flooder.loop_start()
    payload = b"\\xc1" * 2000
    valid = [f"burst-{i}" for i in range(600)]
    invalid = [f"Bad-{i}\\\\" for i in range(300)] + [f"x y {i}" for i in range(300)]
    try:
        for _ in range(3):
            for name in valid + invalid:
                flooder.publish(f"barkwatch/v1/frames/{name}", payload, qos=0)
        wait_until(lambda: analyzer._inbox.dropped > 0 and analyzer._inbox.empty(),
                   timeout_s=60, what="drops, then an empty inbox")
        time.sleep(0.5)  # the last QoS 0 messages on their way
        dropped = analyzer._inbox.dropped
        wait_until(lambda: analyzer._drops_written == analyzer._inbox.drops(), timeout_s=30,
                   what="every drop counted in a point")
        time.sleep(3 * config.stats_interval_s)  # intervals without drops: no points
    finally:
        flooder.disconnect()
        flooder.loop_stop()
        analyzer.stop()
    rows = _rows(services, "SELECT * FROM analyzer_drops")
    per_time: dict[object, int] = {}
    for row in rows:
        per_time[row["time"]] = per_time.get(row["time"], 0) + 1
    assert dropped > 100
    assert max(per_time.values()) <= MAX_DROP_POINTS + 2  # ten devices, _other, _invalid
    assert {str(row["device"]) for row in rows} <= set(valid) | {"_other", "_invalid"}
    assert sum(int(row.get("device_quota") or 0) + int(row.get("inbox_full") or 0)  # type: ignore[call-overload]
               for row in rows) == analyzer._inbox.dropped
    assert len(per_time) <= 10  # points only while drops happened, never one per interval


def test_a_second_frame_at_a_stored_capture_time_is_refused_as_a_duplicate_time(
    services: Services,
) -> None:
    config = analyzer_config(services)
    frames = frames_of("same-t", 3)
    twins = [dataclasses.replace(frames[1], seq=7, laeq_db=frames[1].laeq_db - 3.0),
             dataclasses.replace(frames[2], seq=8)]  # same capture times, other numbers
    analyzer = run_analyzer(config)
    publisher = Publisher(config)
    try:
        for frame in [frames[0], frames[1], twins[0], frames[2], twins[1]]:
            publisher.publish(frame_topic("same-t"), encode_frame(frame))
        wait_until(lambda: analyzer.counters.frames_stored + analyzer.counters.duplicate_time
                   == 5, timeout_s=60, what="five frames handled")
    finally:
        publisher.close()
        analyzer.stop()
    assert (analyzer.counters.frames_stored, analyzer.counters.duplicate_time) == (3, 2)
    rows = _rows(services, "SELECT seq, laeq_db FROM level WHERE device = 'same-t'")
    assert [row["seq"] for row in rows] == [0, 1, 2]  # what the counter says is stored
    assert abs(float(str(rows[1]["laeq_db"])) - float(frames[1].laeq_db)) < 0.01  # the first


def test_a_retained_frame_is_not_taken_again_at_each_reconnect(services: Services) -> None:
    config = analyzer_config(services)
    frame = frames_of("ret-1", 1)[0]
    first = run_analyzer(config)
    publisher = Publisher(config)
    try:
        publisher.publish(frame_topic("ret-1"), encode_frame(frame), retain=True)
        wait_until(lambda: first.counters.frames_stored == 1, timeout_s=30,
                   what="the live frame stored")
    finally:
        first.stop()
    again = run_analyzer(config)  # the same persistent session subscribes again
    try:
        wait_until(lambda: again.counters.retained_frames == 1, timeout_s=30,
                   what="the retained copy delivered")
    finally:
        publisher.close()
        again.stop()
    assert first.counters.retained_frames == 0
    assert again.counters.frames_stored == 0


class FrozenClock:
    """The analyzer's monotonic clock, moved only by the test: one housekeeping pass per
    step of at least a second."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_many_devices_falling_silent_at_once_are_freed_a_bounded_number_per_pass(
    services: Services,
) -> None:
    clock = FrozenClock()
    config = analyzer_config(services)
    analyzer = run_analyzer(config, clock)
    publisher = Publisher(config)
    devices = [f"quiet-{i}" for i in range(120)]
    passes = []
    try:
        for device in devices:
            publisher.publish(frame_topic(device), encode_frame(frames_of(device, 1)[0]))
        wait_until(lambda: analyzer.counters.frames_stored == 120, what="120 devices' frames")
        clock.now_s += config.forget_device_after_s
        for expected in (FORGETS_PER_PASS, 2 * FORGETS_PER_PASS, 120):

            def freed(count: int = expected) -> bool:
                return analyzer.counters.devices_forgotten == count

            wait_until(freed, timeout_s=30, what=f"{expected} devices freed")
            time.sleep(0.3)  # no further pass without a step of the clock
            passes.append(analyzer.counters.devices_forgotten)
            clock.now_s += 1.0
    finally:
        publisher.close()
        analyzer.stop()
    assert passes == [50, 100, 120]  # storage goes on between the passes
