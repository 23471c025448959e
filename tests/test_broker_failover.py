"""A sensor with `mqtt.fallback_brokers` (the nodes of a clustered broker, issue 37) moves to
another node when its broker dies or cannot be reached, and its outbox drains there: real
Mosquitto processes on loopback, the sensor's own FramePublisher and Outbox."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from analyzer.deploy.services import Mosquitto
from sensor.config import MqttSettings, check_connection_settings
from sensor.errors import ConfigError
from sensor.outbox import Outbox
from sensor.publisher import CONFIRM_BY_BROKER, FramePublisher
from sensor.wire import frame_topic
from tests.conftest import wait_until

DEVICE = "yard-1"


class Listener:
    """A plain subscriber on one broker that keeps every frame payload it receives."""

    def __init__(self, port: int) -> None:
        self.payloads: list[bytes] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self.client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
                                  client_id=f"listener-{port}")
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *args: self._subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=10)
        self.client.loop_start()
        assert self._subscribed.wait(30), "the listener's SUBACK"

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, p: Any) -> None:
        client.subscribe(frame_topic(DEVICE), qos=1)

    def _on_message(self, client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.payloads.append(bytes(message.payload))

    def received(self) -> set[bytes]:
        with self._lock:
            return set(self.payloads)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[Mosquitto]]:
    """Two plain Mosquitto brokers on free loopback ports (stand-ins for two cluster nodes)."""
    running = [Mosquitto(tmp_path / f"node-{k}") for k in range(2)]
    try:
        for broker in running:
            broker.start()
        yield running
    finally:
        for broker in running:
            broker.stop()


def settings_for(first: Mosquitto, then: Mosquitto) -> MqttSettings:
    return MqttSettings(host="127.0.0.1", port=first.port, protocol="mqttv311",
                        fallback_brokers=f"127.0.0.1:{then.port}", reconnect_max_s=1,
                        keepalive_s=5)


def test_a_sensor_whose_broker_dies_drains_its_outbox_through_the_next_node(
    brokers: list[Mosquitto], tmp_path: Path
) -> None:
    first, second = brokers
    on_first, on_second = Listener(first.port), Listener(second.port)
    outbox = Outbox(tmp_path / "outbox.sqlite")
    publisher = FramePublisher(DEVICE, settings_for(first, second), outbox,
                               heartbeat_interval_s=3600, confirm=CONFIRM_BY_BROKER)
    publisher.start()
    try:
        before = {b"frame %d" % seq for seq in range(5)}
        for seq in range(5):
            outbox.put(seq, b"frame %d" % seq)
        assert publisher.wait_drained(timeout_s=60)
        wait_until(lambda: on_first.received() == before, 30, "the first node's frames")
        assert on_second.received() == set()

        first.stop()  # the node dies; the sensor goes on measuring
        after = {b"frame %d" % seq for seq in range(5, 10)}
        for seq in range(5, 10):
            outbox.put(seq, b"frame %d" % seq)
        assert publisher.wait_drained(timeout_s=60)
        wait_until(lambda: after <= on_second.received(), 30, "the frames on the next node")
        # Frames acknowledged shortly before a reconnect go out again (the analyzer drops the
        # duplicates), so the next node may see some of the first five too; nothing else.
        assert on_second.received() <= before | after
        assert publisher.connects == 2
        assert publisher.heartbeat()["broker_state"] == "connected"
    finally:
        publisher.stop()
        outbox.close()
        on_first.close()
        on_second.close()


def test_a_sensor_whose_first_broker_is_down_at_start_reaches_the_next_one(
    brokers: list[Mosquitto], tmp_path: Path
) -> None:
    first, second = brokers
    first.stop()
    on_second = Listener(second.port)
    outbox = Outbox(tmp_path / "outbox.sqlite")
    publisher = FramePublisher(DEVICE, settings_for(first, second), outbox,
                               heartbeat_interval_s=3600, confirm=CONFIRM_BY_BROKER)
    outbox.put(0, b"measured while the first node was down")
    publisher.start()
    try:
        assert publisher.wait_drained(timeout_s=60)
        wait_until(lambda: on_second.received() == {b"measured while the first node was down"},
                   30, "the frame on the second node")
        assert publisher.connects == 1
    finally:
        publisher.stop()
        outbox.close()
        on_second.close()


@pytest.mark.parametrize("value", ["node-2", "node-2:", "node-2:0", "node-2:65536",
                                   ":8883", "node-2:88x3"])
def test_a_malformed_fallback_broker_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check_connection_settings(MqttSettings(fallback_brokers=f"node-1:8883, {value}"))
    assert str(refused.value) == (f"config key 'mqtt.fallback_brokers': {value!r} is not "
                                  "host:port (a port from 1 to 65535)")


def test_fallback_brokers_are_tried_in_the_order_written() -> None:
    settings = MqttSettings(host="node-1", port=8883,
                            fallback_brokers=" node-2:8884 ,[::1]:8885,, node-3:8883 ")
    assert settings.brokers() == [("node-1", 8883), ("node-2", 8884), ("::1", 8885),
                                  ("node-3", 8883)]
    assert MqttSettings().brokers() == [("127.0.0.1", 1883)]
