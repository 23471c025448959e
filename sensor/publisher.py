"""Publishes frames from the outbox over MQTT (paho-mqtt 2.x, QoS 1) and sends heartbeats.

One thread owns the in-flight map (MQTT message id -> sequence number). paho calls
``on_publish`` while holding its own lock, so the callback only queues the acknowledged id;
this thread deletes the frame from the outbox. paho re-sends unacknowledged QoS 1 messages
after a reconnect, and reconnects by itself with capped exponential backoff.

The status topic carries ``online`` (retained) after each connect and ``offline`` through
the Last Will when the connection dies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt

from sensor import __version__
from sensor.config import MqttSettings
from sensor.outbox import Outbox
from sensor.wire import frame_topic, heartbeat_topic, status_topic

log = logging.getLogger(__name__)


def make_client(client_id: str, settings: MqttSettings, clean_session: bool = True) -> mqtt.Client:
    """A paho 2.x client with credentials, TLS and reconnect backoff from the settings."""
    client = mqtt.Client(
        callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=clean_session,
        protocol=mqtt.MQTTv311,
    )
    if settings.username:
        client.username_pw_set(settings.username, settings.password())
    if settings.tls_ca:
        client.tls_set(ca_certs=settings.tls_ca, tls_version=ssl.PROTOCOL_TLS_CLIENT)
    client.reconnect_delay_set(min_delay=1, max_delay=settings.reconnect_max_s)
    return client


class FramePublisher:
    """Drains the outbox to the broker; deletes a frame only after its PUBACK."""

    def __init__(
        self,
        device_id: str,
        settings: MqttSettings,
        outbox: Outbox,
        max_inflight: int = 100,
        heartbeat_interval_s: float = 30.0,
        health: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.device_id = device_id
        self.settings = settings
        self.outbox = outbox
        self.max_inflight = max_inflight
        self.heartbeat_interval_s = heartbeat_interval_s
        self.health = health or dict
        self.published = 0
        self.acknowledged = 0
        self.connects = 0
        self._acks: queue.Queue[int] = queue.Queue()
        self._inflight: dict[int, int] = {}
        self._connected = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self._started = time.monotonic()
        self.client = make_client(f"barkwatch-sensor-{device_id}", settings)
        self.client.will_set(status_topic(device_id), "offline", qos=1, retain=True)
        self.client.max_inflight_messages_set(max_inflight)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_publish

    # paho callbacks: run on paho's network thread; keep them short.
    def _on_connect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        if reason.is_failure:
            log.error(
                "broker %s:%d refused the connection: %s",
                self.settings.host,
                self.settings.port,
                reason,
            )
            return
        self.connects += 1
        log.info("connected to broker %s:%d", self.settings.host, self.settings.port)
        client.publish(status_topic(self.device_id), "online", qos=1, retain=True)
        self._connected.set()

    def _on_disconnect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        self._connected.clear()
        if not self._stop.is_set():
            log.warning("disconnected from broker (%s); reconnecting with backoff", reason)

    def _on_publish(
        self, client: mqtt.Client, userdata: Any, mid: int, reason: Any, properties: Any
    ) -> None:
        self._acks.put(mid)

    @property
    def connected(self) -> bool:
        """Whether the broker connection is up."""
        return self._connected.is_set()

    def inflight(self) -> int:
        """Frames published and not yet acknowledged."""
        return len(self._inflight)

    def start(self) -> None:
        """Connect (asynchronously, retrying) and start draining the outbox."""
        self.client.connect_async(self.settings.host, self.settings.port, self.settings.keepalive_s)
        self.client.loop_start()
        self._thread.start()

    def wait_drained(self, timeout_s: float | None = None, progress_s: float = 5.0) -> bool:
        """Block until the outbox is empty (every frame acknowledged); False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last_report = time.monotonic()
        while self.outbox.backlog() > 0:
            if deadline is not None and time.monotonic() > deadline:
                return False
            if time.monotonic() - last_report >= progress_s:
                log.info(
                    "waiting for the broker to acknowledge %d frame(s)%s",
                    self.outbox.backlog(),
                    "" if self.connected else " (not connected)",
                )
                last_report = time.monotonic()
            time.sleep(0.05)
        return True

    def stop(self) -> None:
        """Publish ``offline``, disconnect and stop; unacknowledged frames stay in the outbox."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.connected:
            info = self.client.publish(status_topic(self.device_id), "offline", qos=1, retain=True)
            with contextlib.suppress(RuntimeError, ValueError):
                info.wait_for_publish(timeout=2)
        self.client.disconnect()
        self.client.loop_stop()

    def heartbeat(self) -> dict[str, Any]:
        """The heartbeat document: counters and clock state, merged with ``health()``."""
        document = {
            "device_id": self.device_id,
            "time_ns": time.time_ns(),
            "uptime_s": round(time.monotonic() - self._started, 3),
            "software_version": __version__,
            "outbox_backlog": self.outbox.backlog(),
            "outbox_evicted": self.outbox.evicted,
            "published": self.published,
            "acknowledged": self.acknowledged,
            "inflight": self.inflight(),
            "connects": self.connects,
        }
        document.update(self.health())
        return document

    def _run(self) -> None:
        next_heartbeat = time.monotonic()
        while not self._stop.is_set():
            self._collect_acks()
            if self.connected and time.monotonic() >= next_heartbeat:
                payload = json.dumps(self.heartbeat(), sort_keys=True)
                self.client.publish(heartbeat_topic(self.device_id), payload, qos=1, retain=True)
                next_heartbeat = time.monotonic() + self.heartbeat_interval_s
            sent = self._publish_waiting() if self.connected else 0
            if not sent:
                self._stop.wait(0.02)
        self._collect_acks()

    def _collect_acks(self) -> None:
        done: list[int] = []
        while True:
            try:
                mid = self._acks.get_nowait()
            except queue.Empty:
                break
            seq = self._inflight.pop(mid, None)
            if seq is not None:
                done.append(seq)
        if done:
            self.outbox.delete(done)
            self.acknowledged += len(done)

    def _publish_waiting(self) -> int:
        room = self.max_inflight - len(self._inflight)
        if room <= 0:
            return 0
        after = max(self._inflight.values(), default=-1)
        rows = self.outbox.peek(room, after_seq=after)
        if not rows and self._inflight:
            return 0
        for seq, payload in rows:
            info = self.client.publish(frame_topic(self.device_id), payload, qos=1)
            if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
                log.warning("publish of frame %d failed (%s); will retry", seq, info.rc)
                break
            # NO_CONN: paho keeps QoS 1 messages and sends them after reconnecting.
            self._inflight[info.mid] = seq
            self.published += 1
        return len(rows)
