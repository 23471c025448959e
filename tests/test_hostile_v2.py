"""Hostile input on wire v2 (issue 32) against the live analyzer, with a real Mosquitto and
InfluxDB: times that would exhaust InfluxDB, drop points that amplify, frames that overwrite
each other, retained frames taken again."""

from __future__ import annotations

import dataclasses
import json
import time

from analyzer.deploy.services import Services
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
    assert sorted(row[2] for row in kept) == [i for i in range(40) if i != 20]
    assert {row[1] for row in kept} == {f.capture_ns for f in hostile if f.seq != 20}
    beats = _query(services, "SELECT implausible_time, claimed_time_ns FROM sensor_health")
    assert sorted((row[1], row[2]) for row in beats) == sorted(
        [(True, 1), (True, 7_258_118_400 * NS), (False, None)])
    assert len(_query(services, "SELECT laeq_db FROM level WHERE device = 'good-1'")) == 3
