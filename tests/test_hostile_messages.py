"""Hostile and clumsy input against the live analyzer (issue 27, items 1-5 and 9), with a real
Mosquitto and InfluxDB: one message never stops it, and no frame decides how later ones are
treated."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgpack
import paho.mqtt.client as mqtt
import pytest

from analyzer import cli
from analyzer.config import AnalyzerConfig, InfluxSettings
from analyzer.deploy.services import Services
from analyzer.ingest.ordering import ReorderBuffer
from analyzer.ingest.service import Analyzer
from analyzer.store.influx import InfluxClient, write_with_retry
from sensor.frames import frames_from_samples
from sensor.wire import (
    GATE_DOG,
    Frame,
    encode_frame,
    frame_topic,
    heartbeat_topic,
    status_topic,
)
from tests.conftest import publish_through_analyzer, sine, wait_until
from tests.test_end_to_end import FULL_SCALE_DB, START_NS, analyzer_config, stored_seqs

RATE = 16000  # the cheapest rate a sensor supports: these tests need many frames, not audio


@functools.cache
def _frames(seconds: int) -> tuple[Frame, ...]:
    samples = sine(500.0, 0.1, float(seconds), RATE)
    return tuple(frames_from_samples(samples, RATE, FULL_SCALE_DB, "dev", START_NS))


def frames_of(device: str, seconds: int) -> list[Frame]:
    """``seconds`` consecutive frames (seq 0, 1, ...) of a 500 Hz tone from ``device``."""
    return [dataclasses.replace(f, device_id=device) for f in _frames(seconds)]


class Clock:
    """Monotonic time that a test can move forward."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset_s


class Publisher:
    """A plain MQTT client that publishes and waits for the broker's acknowledgement."""

    def __init__(self, config: AnalyzerConfig) -> None:
        self.client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
        self.client.connect(config.mqtt.host, config.mqtt.port)
        self.client.loop_start()

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> None:
        self.client.publish(topic, payload, qos=qos, retain=retain).wait_for_publish(timeout=10)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def run_analyzer(config: AnalyzerConfig, clock: Callable[[], float] | None = None
                 ) -> Analyzer:
    analyzer = Analyzer(config) if clock is None else Analyzer(config, clock=clock)
    analyzer.start()
    wait_until(analyzer.connected.is_set, what="the analyzer to connect")
    return analyzer


def level_rows(services: Services, device: str) -> list[dict[str, object]]:
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    series = client.query(f"SELECT * FROM level WHERE device = '{device}'")
    if not series:
        return []
    return [dict(zip(series[0]["columns"], row, strict=True)) for row in series[0]["values"]]


def scored_seqs(services: Services, device: str) -> list[int]:
    return sorted(int(row["seq"]) for row in level_rows(services, device)  # type: ignore[call-overload]
                  if row["max_dog_score"] is not None)


# --- item 1: one message must never stop the worker ------------------------------------------

def test_deep_json_huge_integers_and_mixed_key_frames_are_counted_acknowledged_and_survived(
    services: Services,
) -> None:
    config = analyzer_config(services)
    good = frames_of("dev-h", 4)
    raw = msgpack.unpackb(encode_frame(good[0]), raw=False)
    raw[b"extra"], raw["other"] = 1, 2  # one bytes key, one text key
    publisher = Publisher(config)
    try:
        publisher.publish(heartbeat_topic("dev-h"), b"[" * 60_000, retain=True)
        first = run_analyzer(config)
        try:
            # Under the heartbeat size limit, yet nested past the interpreter's stack:
            publisher.publish(heartbeat_topic("dev-h"), b"[" * 10_000)
            publisher.publish(heartbeat_topic("dev-i"), b'{"device_id": "dev-i", "time_ns": '
                              + b"9" * 5000 + b"}")
            publisher.publish(frame_topic("dev-h"), msgpack.packb(raw, use_bin_type=True))
            for frame in good[:3]:
                publisher.publish(frame_topic("dev-h"), encode_frame(frame))
            wait_until(lambda: first.counters.frames_stored == 3, what="3 stored frames")
        finally:
            first.stop()
        assert first.failure is None
        assert first.counters.heartbeat_malformed == 3
        assert first.counters.malformed + first.counters.handler_errors == 1
        # Every one was acknowledged: a new session gets only the retained heartbeat again.
        second = run_analyzer(config)
        try:
            publisher.publish(frame_topic("dev-h"), encode_frame(good[3]))
            wait_until(lambda: second.counters.frames_stored == 1, what="the fourth frame")
        finally:
            second.stop()
    finally:
        publisher.close()
    assert second.counters.received == 2
    assert second.counters.heartbeat_malformed == 1
    assert stored_seqs(services, "dev-h") == [0, 1, 2, 3]


def test_a_worker_that_dies_anyway_makes_analyzer_run_exit_with_status_1(
    services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Fatal(BaseException):
        pass

    def die(self: Analyzer) -> None:
        raise Fatal("simulated")

    monkeypatch.setattr(Analyzer, "_init_storage", die)
    config = tmp_path / "analyzer.toml"
    config.write_text(f'[mqtt]\nport = {services.broker.port}\n'
                      f'[influx]\nurl = "{services.influx.url}"\n')
    assert cli.main(["analyzer", "run", "--config", str(config)]) == 1


# --- item 2 and 9: writes split by bytes; refused points set aside, not counted stored ------

def test_points_totalling_more_than_influxdbs_body_limit_are_stored_without_a_retry(
    services: Services,
) -> None:
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    client.create_database()
    text = "x" * 58_000  # 600 of these make 35 MB, over InfluxDB's 25 MB body limit
    lines = [f'big,device=dev-b cal="{text}" {START_NS + i}' for i in range(600)]
    stop = threading.Event()
    assert write_with_retry(client, lines, stop, on_retry=stop.set) == []
    assert client.query("SELECT count(cal) FROM big")[0]["values"][0][1] == 600


def test_a_frame_influxdb_refuses_is_set_aside_counted_and_not_counted_as_stored(
    services: Services, tmp_path: Path
) -> None:
    frames = frames_of("dev-r", 5)
    # A frame with one band more at the bottom has a field no other frame has; InfluxDB
    # already holds that field as a string, so it refuses this one point (type conflict).
    bands = frames[2].bands_db
    frames[2] = dataclasses.replace(frames[2], band_first_index=frames[2].band_first_index - 1,
                                    bands_db=bands.copy(), gate=GATE_DOG)  # sent with its bands
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    client.create_database()
    client.write_lines([f'level,device=dev-r band_20hz_db="text" {START_NS - 1}'])
    refused_file = tmp_path / "refused.lp"
    config = dataclasses.replace(analyzer_config(services), influx=dataclasses.replace(
        analyzer_config(services).influx, refused_points_file=str(refused_file)))
    analyzer = publish_through_analyzer(config, frame_topic("dev-r"),
                                        [encode_frame(f) for f in frames], stored=4)
    assert analyzer.counters.points_refused == 1
    assert stored_seqs(services, "dev-r") == [0, 1, 3, 4]
    kept = refused_file.read_text().splitlines()
    assert len(kept) == 2 and "field type conflict" in kept[0]
    assert kept[1].startswith("level,device=dev-r ") and "seq=2i" in kept[1]


# --- item 3: held frames neither stall the broker nor wait forever --------------------------

def test_eleven_devices_each_missing_frame_1_do_not_stop_a_good_devices_20_frames(
    services: Services,
) -> None:
    clock = Clock()
    config = analyzer_config(services)
    frames = _frames(102)
    publisher = Publisher(config)
    analyzer = run_analyzer(config, clock)
    try:
        for n in range(11):
            device = f"gap-{n:02d}"
            for frame in frames[:1] + frames[2:]:
                publisher.publish(frame_topic(device),
                                  encode_frame(dataclasses.replace(frame, device_id=device)))
        for frame in frames_of("good-1", 20):
            publisher.publish(frame_topic("good-1"), encode_frame(frame))
        wait_until(lambda: analyzer.counters.frames_stored == 11 * 101 + 20,
                   what="every frame stored")
        assert scored_seqs(services, "good-1") == list(range(20))
        assert scored_seqs(services, "gap-00") == [0]  # the others wait for frame 1
        assert analyzer.counters.frames_held == 11 * 100
        clock.offset_s += config.reorder_wait_s
        wait_until(lambda: analyzer.counters.gaps_given_up == 11, what="the gaps given up")
        wait_until(lambda: len(scored_seqs(services, "gap-10")) == 101, what="scores")
    finally:
        publisher.close()
        analyzer.stop()
    assert analyzer.counters.frames_lost == 11
    assert scored_seqs(services, "gap-00") == [0, *range(2, 102)]


# --- item 4: acknowledgement by the message's own QoS -----------------------------------------

def test_a_retained_qos0_status_message_does_not_disconnect_the_analyzer(
    services: Services,
) -> None:
    config = analyzer_config(services)
    publisher = Publisher(config)
    publisher.publish(status_topic("dev-q"), b"online", qos=0, retain=True)
    analyzer = run_analyzer(config)
    try:
        wait_until(lambda: analyzer.counters.status_changes >= 1, what="the status")
        for stored, frame in enumerate(frames_of("dev-q", 2), start=1):
            publisher.publish(frame_topic("dev-q"), encode_frame(frame))
            wait_until(lambda: analyzer.counters.frames_stored == stored,  # noqa: B023
                       what=f"frame {stored}")
    finally:
        publisher.close()
        analyzer.stop()
    assert analyzer.counters.broker_disconnects == 0
    assert analyzer.counters.status_changes == 1


# --- item 5: no untrusted frame sets per-device state; restarts are detected -----------------

def test_a_sensor_restarting_its_sequence_numbers_has_its_new_frames_stored_and_scored(
    services: Services,
) -> None:
    before = frames_of("dev-s", 4)
    later = frames_of("dev-s", 14)[10:]  # captured 10 s on, numbered 0..3 again (wiped outbox)
    after = [dataclasses.replace(f, seq=i) for i, f in enumerate(later)]
    analyzer = publish_through_analyzer(analyzer_config(services), frame_topic("dev-s"),
                                        [encode_frame(f) for f in before + after], stored=8)
    assert analyzer.counters.sequence_restarts == 1
    assert analyzer.counters.duplicates == 0
    rows = level_rows(services, "dev-s")
    assert [row["seq"] for row in rows] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert all(row["max_dog_score"] is not None for row in rows)


@pytest.mark.parametrize("odd", ["25 scores a second", "0.025 s step"])
def test_an_odd_first_frame_is_dropped_without_changing_how_later_frames_are_judged(
    services: Services, odd: str
) -> None:
    frames = frames_of("dev-o", 5)
    first = frames[0]
    if odd == "25 scores a second":  # 25 steps of 40 ms
        first = dataclasses.replace(first, hop_s=0.04, envelope_hop_s=1.0,
                                    laeq_blocks_db=first.laeq_blocks_db[:1],
                                    laf_blocks_db=first.laf_blocks_db[:1],
                                    dog_steps=first.dog_steps[::2])
    else:  # 40 steps of 25 ms: consistent with itself, not with the detector
        first = dataclasses.replace(first, hop_s=0.025, dog_steps=first.dog_steps[:40])
    payloads = [encode_frame(first)] + [encode_frame(f) for f in frames[1:]]
    analyzer = publish_through_analyzer(analyzer_config(services), frame_topic("dev-o"),
                                        payloads, stored=4)
    assert analyzer.counters.malformed == 1
    assert scored_seqs(services, "dev-o") == [1, 2, 3, 4]


def test_a_first_frame_numbered_2_to_the_62_leaves_later_frames_scored(
    services: Services,
) -> None:
    frames = frames_of("dev-w", 5)
    frames[0] = dataclasses.replace(frames[0], seq=2**62)
    analyzer = publish_through_analyzer(analyzer_config(services), frame_topic("dev-w"),
                                        [encode_frame(f) for f in frames], stored=5)
    assert analyzer.counters.late_frames == 0
    assert scored_seqs(services, "dev-w") == [1, 2, 3, 4, 2**62]


# --- item 9: idle devices are forgotten ------------------------------------------------------

def test_a_device_silent_longer_than_the_forget_time_is_freed_and_analysed_again_on_return(
    services: Services,
) -> None:
    clock = Clock()
    config = analyzer_config(services)
    frames = frames_of("dev-f", 6)
    publisher = Publisher(config)
    analyzer = run_analyzer(config, clock)
    try:
        for frame in frames[:3]:
            publisher.publish(frame_topic("dev-f"), encode_frame(frame))
        wait_until(lambda: analyzer.counters.frames_stored == 3, what="3 frames")
        assert analyzer.tracked_devices == ["dev-f"]
        clock.offset_s += config.forget_device_after_s
        wait_until(lambda: analyzer.counters.devices_forgotten == 1, what="the device forgotten")
        assert analyzer.tracked_devices == []
        for frame in frames[3:]:
            publisher.publish(frame_topic("dev-f"), encode_frame(frame))
        wait_until(lambda: analyzer.counters.frames_stored == 6, what="6 frames")
    finally:
        publisher.close()
        analyzer.stop()
    assert scored_seqs(services, "dev-f") == list(range(6))


# --- the reorder buffer alone, clock passed in ------------------------------------------------

def test_the_reorder_buffer_gives_up_a_gap_once_a_frame_waited_max_wait_s() -> None:
    frames = _frames(5)
    buffer = ReorderBuffer(window=100, max_wait_s=30.0)
    released = buffer.push(frames[0], now_s=0.0) + buffer.push(frames[2], now_s=1.0)
    released += buffer.push(frames[3], now_s=2.0) + buffer.expire(now_s=30.9)
    assert [f.seq for f in released] == [0]
    released += buffer.expire(now_s=31.0)
    assert [f.seq for f in released] == [0, 2, 3]
    assert (buffer.gaps, buffer.skipped, buffer.waiting) == (1, 1, 0)


def test_the_reorder_buffer_takes_a_lower_number_captured_later_as_a_restart() -> None:
    frames = _frames(8)
    buffer = ReorderBuffer(window=100)
    released = [f.seq for f in buffer.push(frames[4]) + buffer.push(frames[6])]
    released += [f.seq for f in buffer.push(frames[3])]  # captured earlier: late
    restarted = dataclasses.replace(frames[7], seq=0)
    released += [f.seq for f in buffer.push(restarted)]
    assert released == [4, 6, 0]
    assert (buffer.late, buffer.restarts, buffer.gaps) == (1, 1, 1)
