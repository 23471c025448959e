"""Publishes frames from the outbox over MQTT (paho-mqtt 2.x, QoS 1) and sends heartbeats.

One thread owns the in-flight map (MQTT message id -> sequence number). paho calls
``on_publish`` while holding its own lock, so the callback only queues the acknowledged id
and the broker's reason code; this thread acts on them. paho re-sends unacknowledged QoS 1
messages after a reconnect, and reconnects by itself with capped exponential backoff.

What a PUBACK means for a frame (see :func:`puback_outcome`):

- success: the broker has the frame. With ``confirm = "analyzer"`` (the default) it stays in
  the outbox until the analyzer confirms that it stored it (:mod:`sensor.confirmations`: the
  broker may still drop what it acknowledged), and is sent again when no confirmation comes;
  with ``confirm = "broker"`` it is deleted at once.
- reason 135, "not authorized" (MQTT 5 only): the broker's ACL refuses this topic to this
  user. Retrying cannot help, so the frame is logged, counted in ``denied`` (heartbeat) and
  deleted from the outbox. This is the only failure that deletes a frame.
- any other failure: the frame stays in the outbox and is sent again after a capped
  backoff.

Under MQTT 3.1.1 a broker acknowledges a denied publish as a success, so denials are
invisible there: use MQTT 5 (the default).

A broker that crashes loses what it acknowledged since it last wrote its persistence file
(Mosquitto: every ``autosave_interval``, 30 s in ``broker_config/barkwatch.conf``). So frames
acknowledged within :data:`RESEND_WINDOW_S` are kept in memory and put back into the outbox
after every reconnect, to be sent again; the analyzer drops the duplicates (issue 23).

The status topic carries ``online`` (retained) after each connect and ``offline`` through
the Last Will when the connection dies.

Why a connection fails (refused, TLS verification, login) is logged at WARNING by the
client's :class:`~sensor.connection.BrokerLink` and reported in the heartbeat
(``broker_state``, ``broker_error``, ``connect_failures``): see :mod:`sensor.connection`.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from sensor import __version__
from sensor.config import MqttSettings
from sensor.confirmations import Unconfirmed, decode_stored, stored_topic
from sensor.connection import BrokerLink, WatchedClient
from sensor.errors import ConfigError
from sensor.outbox import Outbox
from sensor.tls import tls_context
from sensor.wire import frame_topic, heartbeat_topic, status_topic

log = logging.getLogger(__name__)

NOT_AUTHORIZED = 135  # MQTT 5 reason code: the ACL refuses this topic to this user
# Twice the broker's autosave_interval (broker_config/barkwatch.conf), so the writing of one
# save may take as long as the interval itself.
RESEND_WINDOW_S = 60.0
PROTOCOLS = {"mqttv5": mqtt.MQTTv5, "mqttv311": mqtt.MQTTv311}
CONFIRM_BY_ANALYZER = "analyzer"  # delete a frame once the analyzer confirms it stored it
CONFIRM_BY_BROKER = "broker"  # delete a frame at the broker's PUBACK (before issue 32)
CONFIRM_MODES = (CONFIRM_BY_ANALYZER, CONFIRM_BY_BROKER)
SUBSCRIBE_RETRY_MAX_S = 30.0  # a refused confirmation subscription is asked for again


def make_client(
    client_id: str, settings: MqttSettings, persistent: bool = False
) -> WatchedClient:
    """A paho 2.x client with credentials, TLS and reconnect backoff from the settings.

    Its ``link`` (:class:`~sensor.connection.BrokerLink`) learns why each connection attempt
    failed; feed it ``on_connect`` and ``on_disconnect`` (:meth:`BrokerLink.connack`,
    :meth:`BrokerLink.disconnected`) to have the state reported and failures logged.

    ``persistent``: the broker keeps the session (subscriptions, queued QoS 1 messages) while
    the client is away; under MQTT 5 for ``settings.session_expiry_s``. Connect with
    :func:`connect_async` so that the matching CONNECT flags and properties are sent. Raise
    ConfigError when a user name is set but no password can be found.
    """
    protocol = PROTOCOLS[settings.protocol]
    if protocol == mqtt.MQTTv5:  # MQTT 5 has clean start (on connect) instead of clean session
        client = WatchedClient(
            callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=protocol,
        )
    else:
        client = WatchedClient(
            callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=not persistent,
            protocol=protocol,
        )
    login = settings.login()  # the same refusals as validate-config
    if login is not None:
        client.username_pw_set(*login)
    if settings.tls_ca:
        client.tls_set_context(tls_context(settings.tls_ca))
    client.reconnect_delay_set(min_delay=1, max_delay=settings.reconnect_max_s)
    client.brokers = settings.brokers()
    client.link = BrokerLink(client_id, settings)
    return client


def connect_async(client: mqtt.Client, settings: MqttSettings, persistent: bool = False) -> None:
    """Start connecting (paho retries on its own once ``loop_start`` runs).

    Under MQTT 5 a persistent client never asks for a clean start, so a restarted process
    resumes the session it left, and it sends the session expiry interval.
    """
    if settings.protocol == "mqttv5":
        properties = Properties(PacketTypes.CONNECT)
        if persistent and settings.session_expiry_s > 0:
            properties.SessionExpiryInterval = settings.session_expiry_s
        client.connect_async(
            settings.host,
            settings.port,
            settings.keepalive_s,
            clean_start=not persistent,
            properties=properties,
        )
    else:
        client.connect_async(settings.host, settings.port, settings.keepalive_s)


class PubackOutcome(enum.Enum):
    """What a PUBACK means for the frame it acknowledges."""

    STORED = "stored"
    DENIED = "denied"
    RETRY = "retry"


def puback_outcome(reason_code: int) -> PubackOutcome:
    """Classify a PUBACK reason code: below 128 success, 135 denied, other failures retry."""
    if reason_code < 128:
        return PubackOutcome.STORED
    if reason_code == NOT_AUTHORIZED:
        return PubackOutcome.DENIED
    return PubackOutcome.RETRY


class FramePublisher:
    """Drains the outbox to the broker; deletes a frame only after the analyzer confirmed it
    stored it (``confirm = "analyzer"``) or after its PUBACK (``confirm = "broker"``)."""

    def __init__(
        self,
        device_id: str,
        settings: MqttSettings,
        outbox: Outbox,
        max_inflight: int = 100,
        heartbeat_interval_s: float = 30.0,
        health: Callable[[], dict[str, Any]] | None = None,
        confirm: str = CONFIRM_BY_ANALYZER,
        max_unconfirmed: int = 120,
        confirm_timeout_s: float = 10.0,
        confirm_resend_max_s: float = 120.0,
    ) -> None:
        if confirm not in CONFIRM_MODES:
            raise ConfigError(f"outbox confirm {confirm!r} is not one of {CONFIRM_MODES}")
        self.device_id = device_id
        self.confirm = confirm
        self.max_unconfirmed = max_unconfirmed
        self._unconfirmed = Unconfirmed(confirm_timeout_s, confirm_resend_max_s)
        self._confirmations: queue.Queue[bytes] = queue.Queue()
        self._attempts: dict[int, int] = {}  # seq -> times sent, of re-sent frames in flight
        self._confirmed_early: set[int] = set()  # in flight, and confirmed before the PUBACK
        self.confirmed = 0
        self.resent_unconfirmed = 0
        self.bad_confirmations = 0
        self.subscribe_refusals = 0  # SUBACKs refusing the confirmation topic
        self._stored_mid: int | None = None  # the SUBSCRIBE of the confirmation topic
        self._subscribe_at: float | None = None  # when to ask again after a refusal
        self._granted = False  # the broker's SUBACK granted the confirmation topic
        self._subscribe_delay_s = 0.0
        self._subscribe_lock = threading.Lock()  # its SUBACK may come before mid is kept
        self.settings = settings
        self.outbox = outbox
        self.max_inflight = max_inflight
        self.heartbeat_interval_s = heartbeat_interval_s
        self.health = health or dict
        self.published = 0
        self.acknowledged = 0
        self.denied = 0
        self.connects = 0
        self._acks: queue.Queue[tuple[int, int]] = queue.Queue()  # (message id, reason code)
        self._retry_delay_s = 0.0
        self._retry_at = 0.0
        self._inflight: dict[int, int] = {}
        self._payloads: dict[int, bytes] = {}  # seq -> payload of frames in flight
        self._recent: deque[tuple[float, int, bytes]] = deque()  # acknowledged: (when, seq, ..)
        self._reconnected = threading.Event()
        self.resent = 0
        self._connected = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self._started = time.monotonic()
        self.client = make_client(f"barkwatch-sensor-{device_id}", settings, persistent=True)
        self.client.will_set(status_topic(device_id), "offline", qos=1, retain=True)
        self.client.max_inflight_messages_set(max_inflight)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_publish
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe

    # paho callbacks: run on paho's network thread; keep them short.
    def _on_connect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        if not self.link.connack(reason):  # logged there, with the reason
            self._reload_password(client)
            return
        self.connects += 1
        if self.connects > 1:
            self._reconnected.set()
        log.info("connected to broker %s:%d", client.host, client.port)
        if self.confirm == CONFIRM_BY_ANALYZER:
            self._subscribe_stored(client)
        client.publish(status_topic(self.device_id), "online", qos=1, retain=True)
        self._connected.set()

    def _subscribe_stored(self, client: mqtt.Client) -> None:
        with self._subscribe_lock:
            self._subscribe_at, self._granted = None, False
            result, self._stored_mid = client.subscribe(stored_topic(self.device_id), qos=1)
            if result != mqtt.MQTT_ERR_SUCCESS:  # connection gone meanwhile: on_connect asks
                self._stored_mid = None

    def _on_subscribe(
        self, client: mqtt.Client, userdata: Any, mid: int, reasons: Any, properties: Any
    ) -> None:
        with self._subscribe_lock:
            if mid != self._stored_mid:
                return
        refused = [reason for reason in reasons if reason.is_failure]
        if not refused:
            self._subscribe_delay_s, self._granted = 0.0, True
            return
        # A clustered broker refuses it while it elects a leader for its subscription store
        # (nats-server: "Unable to add JetStream consumer for subscription"): without it no
        # confirmation arrives and every frame is sent again and again, never deleted.
        self.subscribe_refusals += 1
        self._subscribe_delay_s = min(max(2 * self._subscribe_delay_s, 1.0),
                                      SUBSCRIBE_RETRY_MAX_S)
        self._subscribe_at = time.monotonic() + self._subscribe_delay_s
        log.warning("the broker refused the subscription to %s (%s): the analyzer's "
                    "confirmations cannot arrive; asking again in %.0f s",
                    stored_topic(self.device_id), refused[0], self._subscribe_delay_s)

    @property
    def confirmations_subscribed(self) -> bool:
        """Whether the broker granted the confirmation topic on this connection."""
        return self._granted

    def _reload_password(self, client: mqtt.Client) -> None:
        # A rotated password may have been installed since start-up: the next reconnect
        # attempt uses whatever the environment or password file holds now.
        if not self.settings.username:
            return
        try:
            password = self.settings.password()
        except ConfigError as exc:
            log.error("cannot re-read the MQTT password: %s", exc)
            return
        if password:
            client.username_pw_set(self.settings.username, password)

    def _on_disconnect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        self._connected.clear()
        self.link.disconnected(reason, stopping=self._stop.is_set())

    def _on_publish(
        self, client: mqtt.Client, userdata: Any, mid: int, reason: Any, properties: Any
    ) -> None:
        self._acks.put((mid, int(getattr(reason, "value", 0))))

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        self._confirmations.put(bytes(message.payload))

    @property
    def link(self) -> BrokerLink:
        """The broker connection's state and last failure."""
        return self.client.link

    @property
    def connected(self) -> bool:
        """Whether the broker connection is up."""
        return self._connected.is_set()

    def inflight(self) -> int:
        """Frames published and not yet acknowledged."""
        return len(self._inflight)

    def start(self) -> None:
        """Connect (asynchronously, retrying) and start draining the outbox."""
        connect_async(self.client, self.settings, persistent=True)
        self.client.loop_start()
        self._thread.start()

    def wait_drained(self, timeout_s: float | None = None, progress_s: float = 5.0) -> bool:
        """Block until the outbox is empty (every frame confirmed, or with ``confirm =
        "broker"`` acknowledged); False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last_report = time.monotonic()
        while self.outbox.backlog() > 0:
            if deadline is not None and time.monotonic() > deadline:
                return False
            if time.monotonic() - last_report >= progress_s:
                log.info(
                    "waiting for the %s to %s %d frame(s)%s",
                    *(("analyzer", "confirm") if self.confirm == CONFIRM_BY_ANALYZER
                      else ("broker", "acknowledge")),
                    self.outbox.backlog(),
                    "" if self.connected else f" (not connected: {self.link.status()})",
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
            "denied": self.denied,
            "inflight": self.inflight(),
            "connects": self.connects,
            "resent": self.resent,
            "confirm": self.confirm,
            "unconfirmed": len(self._unconfirmed),
            "confirmed": self.confirmed,
            "resent_unconfirmed": self.resent_unconfirmed,
            **self.link.status().fields(),
        }
        document.update(self.health())
        return document

    def _run(self) -> None:
        next_heartbeat = time.monotonic()
        while not self._stop.is_set():
            self._collect_acks()
            self._collect_confirmations()
            if self._reconnected.is_set():
                self._reconnected.clear()
                self._resend_recent()
            if (self.connected and self._subscribe_at is not None
                    and time.monotonic() >= self._subscribe_at):
                self._subscribe_stored(self.client)
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
                mid, reason_code = self._acks.get_nowait()
            except queue.Empty:
                break
            seq = self._inflight.pop(mid, None)
            outcome = puback_outcome(reason_code)
            if seq is None:  # a status or heartbeat message
                if outcome is not PubackOutcome.STORED:
                    log.warning("broker refused a status or heartbeat (reason %d)", reason_code)
                continue
            payload = self._payloads.pop(seq, None)
            attempt = self._attempts.pop(seq, 1)
            if outcome is PubackOutcome.STORED and self.confirm == CONFIRM_BY_ANALYZER:
                # Kept until the analyzer confirms it (sensor.confirmations), unless it
                # already has.
                if seq in self._confirmed_early:
                    self._confirmed_early.discard(seq)
                else:
                    self._unconfirmed.sent(seq, time.monotonic(), attempt)
                self.acknowledged += 1
                self._retry_delay_s = 0.0
            elif outcome is PubackOutcome.STORED:
                done.append(seq)
                if payload is not None:
                    self._recent.append((time.monotonic(), seq, payload))
                self.acknowledged += 1
                self._retry_delay_s = 0.0
            elif outcome is PubackOutcome.DENIED:
                # Retrying cannot succeed: the broker's ACL refuses this topic to this user.
                done.append(seq)
                self.denied += 1
                log.error(
                    "broker denied frame %d on %s to user %r (reason 135, not authorized); "
                    "dropped from the outbox. Check device_id and mqtt.username.",
                    seq,
                    frame_topic(self.device_id),
                    self.settings.username,
                )
            else:  # stays in the outbox; sent again once the in-flight window has drained
                self._retry_delay_s = min(
                    max(2 * self._retry_delay_s, 1.0), float(self.settings.reconnect_max_s)
                )
                self._retry_at = time.monotonic() + self._retry_delay_s
                log.warning(
                    "broker refused frame %d (reason %d); retrying in %.0f s",
                    seq,
                    reason_code,
                    self._retry_delay_s,
                )
        if done:
            self.outbox.delete(done)
        while self._recent and time.monotonic() - self._recent[0][0] > RESEND_WINDOW_S:
            self._recent.popleft()

    def _collect_confirmations(self) -> None:
        """Delete the frames the analyzer confirmed it stored."""
        confirmed: list[tuple[int, int]] = []
        while True:
            try:
                payload = self._confirmations.get_nowait()
            except queue.Empty:
                break
            try:
                ranges = decode_stored(payload)
            except ValueError as exc:
                self.bad_confirmations += 1
                log.warning("ignored a confirmation on %s: %s", stored_topic(self.device_id), exc)
                continue
            self._unconfirmed.confirm(ranges)
            # Frames in flight (a copy sent again, or not yet acknowledged by the broker) are
            # not waited for once their PUBACK comes.
            self._confirmed_early.update(
                s for s in self._payloads if any(a <= s <= b for a, b in ranges))
            confirmed += ranges
        # Every confirmed frame leaves the outbox, also one confirmed before a restart.
        self.confirmed += self.outbox.delete_ranges(confirmed)

    def _resend_recent(self) -> None:
        """After a reconnect: put the frames acknowledged within RESEND_WINDOW_S back into
        the outbox (a crashed broker may have lost them; the analyzer drops duplicates)."""
        for _, seq, payload in self._recent:
            self.outbox.put(seq, payload)
        if self._recent:
            log.info("reconnected: %d frame(s) acknowledged in the last %.0f s go out again, "
                     "in case the broker lost them", len(self._recent), RESEND_WINDOW_S)
        self.resent += len(self._recent)
        self._recent.clear()

    def _publish_waiting(self) -> int:
        room = self.max_inflight - len(self._inflight)
        if room <= 0 or time.monotonic() < self._retry_at:
            return 0
        after = max(max(self._inflight.values(), default=-1), self._unconfirmed.highest())
        rows: list[tuple[int, bytes]] = []
        if self.confirm == CONFIRM_BY_ANALYZER:
            # Copies of frames already out come first and do not count against
            # max_unconfirmed again: with that many out and all lost (a broker that dropped
            # them), waiting for room would wait for ever.
            rows = self._overdue(room)
            out = len(self._inflight) + len(self._unconfirmed) + len(rows)
            room = min(room - len(rows), self.max_unconfirmed - out)
        rows += self.outbox.peek(room, after_seq=after) if room > 0 else []
        if not rows and self._inflight:
            return 0
        for index, (seq, payload) in enumerate(rows):
            info = self.client.publish(frame_topic(self.device_id), payload, qos=1)
            if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
                log.warning("publish of frame %d failed (%s); will retry", seq, info.rc)
                for unsent, _ in rows[index:]:  # overdue copies wait their turn again
                    if unsent in self._attempts:
                        self._unconfirmed.sent(unsent, time.monotonic(),
                                               self._attempts.pop(unsent) - 1)
                break
            # NO_CONN: paho keeps QoS 1 messages and sends them after reconnecting.
            self._inflight[info.mid] = seq
            self._payloads[seq] = payload
            self.published += 1
        return len(rows)

    def _overdue(self, limit: int) -> list[tuple[int, bytes]]:
        """Frames whose confirmation is overdue, to be sent again (still in the outbox)."""
        rows = []
        for seq, attempt in self._unconfirmed.due(time.monotonic(), limit):
            payload = self.outbox.get(seq)
            if payload is None:  # evicted meanwhile (outbox full)
                continue
            self._attempts[seq] = attempt + 1
            self.resent_unconfirmed += 1
            rows.append((seq, payload))
        if rows:
            log.info("%d frame(s) not confirmed by the analyzer in time, sent again (from "
                     "frame %d)", len(rows), rows[0][0])
        return rows
