"""Publish one message and wait for the broker's acknowledgement, for commands that run beside
the node (``barkwatch-sensor bearing-check``).

The client is :func:`sensor.publisher.make_client`'s, so it logs in, verifies TLS and explains
a failed connection exactly as the node does (:mod:`sensor.connection`). Its client id is
the node's with a suffix: a second connection under the node's own id would make the broker
disconnect the node. It sets no Last Will (the device's status stays the node's) and keeps
no session.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import paho.mqtt.client as mqtt

from sensor.config import MqttSettings
from sensor.errors import SensorError
from sensor.publisher import NOT_AUTHORIZED, connect_async, make_client

log = logging.getLogger(__name__)


class PublishError(SensorError):
    """A message could not be handed to the broker; the message says why."""


def publish_once(settings: MqttSettings, client_id: str, topic: str, payload: bytes,
                 retain: bool, timeout_s: float) -> None:
    """Connect, publish ``payload`` on ``topic`` at QoS 1 and wait for its PUBACK, all within
    ``timeout_s``; PublishError saying why not (the connection's failure as
    :class:`~sensor.connection.BrokerLink` words it, the ACL's refusal, or the time out)."""
    client = make_client(client_id, settings)
    link = client.link
    connected, acked, stopping = threading.Event(), threading.Event(), threading.Event()
    reasons: list[int] = []

    def on_connect(_: mqtt.Client, userdata: Any, flags: Any, reason: Any,
                   properties: Any) -> None:
        if link.connack(reason):  # a refusal is logged there, with its reason
            connected.set()

    def on_disconnect(_: mqtt.Client, userdata: Any, flags: Any, reason: Any,
                      properties: Any) -> None:
        link.disconnected(reason, stopping=stopping.is_set())

    def on_publish(_: mqtt.Client, userdata: Any, mid: int, reason: Any,
                   properties: Any) -> None:
        reasons.append(int(getattr(reason, "value", 0)))
        acked.set()

    client.on_connect, client.on_disconnect = on_connect, on_disconnect
    client.on_publish = on_publish
    deadline = time.monotonic() + timeout_s
    connect_async(client, settings)
    client.loop_start()
    try:
        if not connected.wait(timeout_s):
            raise PublishError(f"no connection to the broker within {timeout_s:.0f} s: "
                               f"{link.status()}")
        client.publish(topic, payload, qos=1, retain=retain)
        if not acked.wait(max(0.0, deadline - time.monotonic())):
            raise PublishError(f"the broker did not acknowledge {topic} within "
                               f"{timeout_s:.0f} s")
        if reasons[0] == NOT_AUTHORIZED:
            raise PublishError(f"the broker's ACL refused {topic} to user "
                               f"{settings.username!r} (reason 135, not authorized)")
        if reasons[0] >= 0x80:
            raise PublishError(f"the broker refused {topic} (reason {reasons[0]})")
        log.info("published %d bytes on %s", len(payload), topic)
    finally:
        stopping.set()
        client.disconnect()
        client.loop_stop()
