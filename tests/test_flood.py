"""A client flooding its topic (issue 23 item 2): the analyzer's inbox stays bounded, QoS 0 beyond a
device's share is dropped and counted by device and reason, QoS 1 is never dropped (its put
waits instead), and other devices' frames are all stored. The inbox alone first, then the live
analyzer with a real Mosquitto and InfluxDB."""

from __future__ import annotations

import dataclasses
import queue
import threading

import msgpack
import paho.mqtt.client as mqtt
import pytest

from analyzer.config import AnalyzerConfig, InfluxSettings
from analyzer.deploy.services import Services
from analyzer.ingest import service
from analyzer.ingest.inbox import DEVICE_QUOTA, INBOX_FULL, Inbox, InboxLimits
from analyzer.store.influx import InfluxClient
from sensor.wire import encode_frame, frame_topic
from tests.conftest import wait_until
from tests.test_end_to_end import analyzer_config, stored_seqs
from tests.test_hostile_messages import Publisher, frames_of, run_analyzer

RUNNING = threading.Event()  # never set: the analyzer is not stopping


def _drain(inbox: Inbox[str]) -> list[str]:
    items = []
    while not inbox.empty():
        items.append(inbox.get(timeout=0))
    return items


# --- the inbox -------------------------------------------------------------------------------
def test_the_worker_takes_devices_in_turn_so_a_backlog_does_not_delay_another_device() -> None:
    inbox: Inbox[str] = Inbox()
    for i in range(5):
        inbox.put(f"flood-{i}", "flood", 10, 1, RUNNING)
    inbox.put("good-0", "good", 10, 1, RUNNING)
    inbox.put("good-1", "good", 10, 1, RUNNING)
    assert _drain(inbox) == ["flood-0", "good-0", "flood-1", "good-1", "flood-2", "flood-3",
                             "flood-4"]


def test_qos0_beyond_a_devices_share_is_dropped_and_counted_for_that_device() -> None:
    inbox: Inbox[str] = Inbox(InboxLimits(device_qos0_messages=3))
    queued = [inbox.put(f"m{i}", "flood", 10, 0, RUNNING) for i in range(5)]
    assert queued == [True, True, True, False, False]
    assert inbox.put("g", "good", 10, 0, RUNNING)
    assert inbox.drops() == {("flood", DEVICE_QUOTA): 2}
    assert inbox.dropped == 2


def test_qos0_is_dropped_once_the_inbox_is_half_full_so_qos1_always_has_room() -> None:
    inbox: Inbox[str] = Inbox(InboxLimits(max_messages=8, device_qos0_messages=100))
    for i in range(4):
        assert inbox.put(f"d{i}", f"dev-{i}", 10, 0, RUNNING)
    assert not inbox.put("late", "dev-9", 10, 0, RUNNING)
    assert inbox.drops() == {("dev-9", INBOX_FULL): 1}
    for i in range(4):
        assert inbox.put(f"q{i}", "sensor", 10, 1, RUNNING)  # up to the full limit, no wait
    assert inbox.waits == 0


def test_qos0_is_dropped_when_its_bytes_would_pass_half_the_byte_limit() -> None:
    inbox: Inbox[str] = Inbox(InboxLimits(max_bytes=1000, device_qos0_messages=100))
    assert inbox.put("a", "dev-a", 400, 0, RUNNING)
    assert not inbox.put("b", "dev-b", 101, 0, RUNNING)
    assert inbox.drops() == {("dev-b", INBOX_FULL): 1}


def test_a_qos1_message_into_a_full_inbox_waits_for_room_and_is_never_dropped() -> None:
    inbox: Inbox[str] = Inbox(InboxLimits(max_messages=2))
    inbox.put("a", "dev", 10, 1, RUNNING)
    inbox.put("b", "dev", 10, 1, RUNNING)
    results: list[bool] = []
    waiting = threading.Thread(target=lambda: results.append(
        inbox.put("c", "dev", 10, 1, RUNNING)))
    waiting.start()
    wait_until(lambda: inbox.waits == 1, timeout_s=10, what="the put to wait")
    assert results == [] and len(inbox) == 2  # still waiting: nothing dropped, nothing queued
    assert inbox.get(timeout=1) == "a"
    waiting.join(timeout=10)
    assert results == [True]
    assert _drain(inbox) == ["b", "c"]
    assert inbox.dropped == 0


def test_a_waiting_qos1_put_gives_up_unqueued_when_the_analyzer_stops() -> None:
    inbox: Inbox[str] = Inbox(InboxLimits(max_messages=1))
    inbox.put("a", "dev", 10, 1, RUNNING)
    stopping = threading.Event()
    results: list[bool] = []
    waiting = threading.Thread(target=lambda: results.append(
        inbox.put("b", "dev", 10, 1, stopping)))
    waiting.start()
    wait_until(lambda: inbox.waits == 1, timeout_s=10, what="the put to wait")
    stopping.set()  # unacknowledged, the message stays with the broker for the next session
    waiting.join(timeout=10)
    assert results == [False]
    assert inbox.dropped == 0 and len(inbox) == 1


def test_an_empty_inbox_takes_a_message_larger_than_its_byte_limit() -> None:
    inbox: Inbox[str] = Inbox(InboxLimits(max_bytes=100))
    assert inbox.put("big", "dev", 5000, 1, RUNNING)  # refused later by the decoder, not here
    assert inbox.get(timeout=0) == "big"


def test_get_on_an_empty_inbox_raises_empty_after_its_timeout() -> None:
    inbox: Inbox[str] = Inbox()
    try:
        inbox.get(timeout=0.01)
    except queue.Empty:
        return
    raise AssertionError("get returned from an empty inbox")


# --- the live analyzer -----------------------------------------------------------------------
FLOOD_MESSAGES = 3000
QOS1_FLOOD = 150
GOOD_FRAMES = 30


def _query(services: Services, query: str) -> list[dict[str, object]]:
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    series = client.query(query)
    if not series:
        return []
    columns = series[0]["columns"]
    return [dict(zip(columns, row, strict=True)) for row in series[0]["values"]]


def flooding_client(config: AnalyzerConfig) -> mqtt.Client:
    """A plain MQTT client of the analyzer's broker, started, with no limit on its queue."""
    flooder = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
    flooder.max_queued_messages_set(0)
    flooder.connect(config.mqtt.host, config.mqtt.port)
    flooder.loop_start()
    return flooder


def test_a_qos0_flood_is_dropped_and_counted_while_a_good_devices_30_frames_are_all_stored(
    services: Services,
) -> None:
    config = analyzer_config(services)
    analyzer = run_analyzer(config)
    template = frames_of("flooder", 1)[0]
    # Distinct sequence numbers, so that the flood is no duplicate: each one is real work.
    flood = [encode_frame(dataclasses.replace(template, seq=i)) for i in range(FLOOD_MESSAGES)]
    flooder = flooding_client(config)
    good = Publisher(config)
    try:
        published = threading.Event()

        def flood_topic() -> None:
            for i, payload in enumerate(flood):
                flooder.publish(frame_topic("flooder"), payload, qos=0)
                if i == FLOOD_MESSAGES // 10:
                    published.set()
            published.set()

        thread = threading.Thread(target=flood_topic, daemon=True)
        thread.start()
        published.wait(timeout=30)
        for frame in frames_of("good", GOOD_FRAMES):  # QoS 1, each acknowledged by the broker
            good.publish(frame_topic("good"), encode_frame(frame))
        thread.join(timeout=60)
        wait_until(lambda: stored_seqs(services, "good") == list(range(GOOD_FRAMES)),
                   timeout_s=120, what="the good device's 30 frames to be stored")
        drops = analyzer._inbox.drops()
        assert drops.get(("flooder", DEVICE_QUOTA), 0) > 0
        assert not any(device == "good" for device, _ in drops)
        wait_until(lambda: bool(_query(services, "SELECT * FROM analyzer_drops WHERE "
                                                 "device = 'flooder'")),
                   timeout_s=30, what="the flooder's drops in InfluxDB")
        row = _query(services, "SELECT last(device_quota) AS n FROM analyzer_drops WHERE "
                               "device = 'flooder'")[0]
        assert isinstance(row["n"], int) and row["n"] > 0
        stats = _query(services, "SELECT last(messages_dropped_flood) AS n FROM analyzer_stats")
        assert isinstance(stats[0]["n"], int) and stats[0]["n"] > 0
    finally:
        flooder.disconnect()
        flooder.loop_stop()
        good.close()
        analyzer.stop()


def test_rejected_frames_are_counted_by_reason_in_analyzer_stats(services: Services) -> None:
    config = analyzer_config(services)
    analyzer = run_analyzer(config)
    publisher = Publisher(config)
    valid = msgpack.unpackb(encode_frame(frames_of("dev-r", 1)[0]), raw=False)
    try:
        publisher.publish(frame_topic("dev-r"), b"\xc1")  # not msgpack
        publisher.publish(frame_topic("dev-r"), b"\xc1")
        publisher.publish(frame_topic("dev-r"),
                          msgpack.packb(valid | {"la": float("nan")}, use_bin_type=True))
        publisher.publish(frame_topic("dev-r"), encode_frame(frames_of("other", 1)[0]))
        wait_until(lambda: bool(_query(
            services, "SELECT last(rejected_device_mismatch) FROM analyzer_stats")),
            timeout_s=30, what="the rejections in analyzer_stats")
        row = _query(services, "SELECT last(rejected_not_msgpack) AS msgpack, "
                               "last(rejected_not_finite) AS nan, last(rejected_device_mismatch)"
                               " AS mismatch, last(malformed) AS malformed FROM analyzer_stats")[0]
        assert (row["msgpack"], row["nan"], row["mismatch"], row["malformed"]) == (2, 1, 1, 3)
        assert analyzer.rejections == {"not_msgpack": 2, "not_finite": 1, "device_mismatch": 1}
    finally:
        publisher.close()
        analyzer.stop()


def test_a_qos1_flood_through_a_tiny_inbox_waits_instead_of_dropping_and_stores_every_frame(
    services: Services, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Four messages at most: the MQTT thread has to wait for room again and again.
    monkeypatch.setattr(service, "INBOX_LIMITS", InboxLimits(max_messages=4))
    # The mode for sensors that delete at the broker's PUBACK (with drop_flood a device's
    # frames beyond its share would be dropped unconfirmed: tests/test_confirmations.py).
    config = dataclasses.replace(analyzer_config(services), drop_flood=False)
    analyzer = run_analyzer(config)
    flood = [encode_frame(frame) for frame in frames_of("flooder", QOS1_FLOOD)]
    flooder = flooding_client(config)
    good = Publisher(config)
    try:
        sent = [flooder.publish(frame_topic("flooder"), payload, qos=1) for payload in flood]
        for frame in frames_of("good", GOOD_FRAMES):
            good.publish(frame_topic("good"), encode_frame(frame))
        for info in sent:
            info.wait_for_publish(timeout=60)  # PUBACKed by the broker: must not be lost
        wait_until(lambda: stored_seqs(services, "good") == list(range(GOOD_FRAMES)),
                   timeout_s=120, what="the good device's 30 frames to be stored")
        wait_until(lambda: stored_seqs(services, "flooder") == list(range(QOS1_FLOOD)),
                   timeout_s=120, what="every acknowledged flood frame to be stored")
        assert analyzer._inbox.waits > 0  # back-pressure was applied
        assert analyzer._inbox.dropped == 0
    finally:
        flooder.disconnect()
        flooder.loop_stop()
        good.close()
        analyzer.stop()
