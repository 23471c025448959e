"""The queue from the MQTT network thread to the analyzer's worker: bounded, fair by device.

Bounded in messages and in payload bytes. The worker takes messages round-robin by device
(each device's own messages in arrival order), so a device that floods its topic waits behind
its own backlog, never in front of other devices' frames.

The two QoS levels are bounded differently, because a QoS 1 message may not be lost:

- QoS 0 (nothing was promised): a message is dropped, and counted by device and reason, when
  its device already has ``device_qos0_messages`` queued (``device_quota``) or the inbox holds
  half its limit (``inbox_full``). Half: QoS 0 traffic alone can never fill the inbox, so it
  never holds up a QoS 1 message.
- QoS 1: the broker acknowledged it to the sensor (PUBACK), which then deleted it from its
  outbox, so dropping it here would lose a frame for good. It is never dropped: when the inbox
  is full, ``put`` waits (back-pressure) and the network thread stops reading from the socket
  until the worker has made room. Two things keep that wait rare and short: the analyzer
  acknowledges a message only after storing it, so the broker sends at most its in-flight
  window of unacknowledged QoS 1 messages (``max_inflight_messages``, 1000 in
  broker_config/barkwatch.conf, within the default limit below), and everything else stays
  queued in the broker's persistent session. Waiting rather than dropping costs only latency;
  while the network thread waits it sends no keepalive, so a wait longer than 1.5 keepalive
  intervals makes the broker close the connection, and it re-sends every unacknowledged
  message after the reconnect (duplicates are dropped on (device, seq, capture time)).
- QoS 1 with ``drop_qos1_flood`` (the analyzer's ``confirm_stored``, the default): sensors
  keep a frame until the analyzer confirms it stored it (sensor/confirmations.py), so a frame
  dropped here is sent again, not lost. A device that already has ``device_qos1_messages``
  queued has more out than a sensor ever sends unconfirmed: the message is dropped and
  counted (``device_flood``), and the caller acknowledges it to the broker at once. One
  flooding device then cannot fill the inbox, nor hold the broker's queue for the analyzer
  behind its backlog: its excess is read off the socket and let go at network speed.

The other direction needs no bound of its own: the worker's acknowledgements are one per
message taken from here, and its retained status publishes one per event or finding.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

DEVICE_QUOTA = "device_quota"  # the device already had its share of QoS 0 messages queued
INBOX_FULL = "inbox_full"  # the QoS 0 share of the whole inbox was in use
DEVICE_FLOOD = "device_flood"  # QoS 1 beyond the device's share, dropped (confirmations on)
DROP_REASONS = (DEVICE_QUOTA, INBOX_FULL, DEVICE_FLOOD)
OTHER_DEVICES = "_other"  # drops of devices beyond MAX_DROP_DEVICES are counted under this
INVALID_TOPICS = "_invalid"  # every topic that names no valid device id: one queue, one count
MAX_DROP_DEVICES = 10_000  # per-device drop counts kept (topics are hostile input)
PUT_POLL_S = 0.1  # how often a waiting put looks whether the analyzer is stopping


@dataclass(frozen=True)
class InboxLimits:
    """How much the inbox holds: ``max_messages`` and ``max_bytes`` (payload and topic) in
    all; a device's QoS 0 messages at most ``device_qos0_messages`` at once."""

    max_messages: int = 2000
    max_bytes: int = 64 * 1024 * 1024
    device_qos0_messages: int = 50
    # A sensor has at most outbox.max_unconfirmed (120) frames out, plus as many copies sent
    # again: a device with more queued here is flooding.
    device_qos1_messages: int = 300


class Inbox(Generic[T]):
    """Bounded, per-device fair queue of items (thread-safe: one producer, one consumer)."""

    def __init__(self, limits: InboxLimits = InboxLimits()) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._queues: dict[str, deque[tuple[T, int, int]]] = {}  # device: (item, bytes, qos)
        self._turns: deque[str] = deque()  # devices with queued items, in serving order
        self._qos0_by_device: dict[str, int] = {}
        self._messages = 0
        self._bytes = 0
        self._drops: dict[tuple[str, str], int] = {}
        self.dropped = 0
        self.dropped_qos1 = 0  # QoS 1 messages dropped beyond a device's share (DEVICE_FLOOD)
        self.waits = 0  # QoS 1 puts that had to wait for room (back-pressure applied)

    def put(self, item: T, device: str, size: int, qos: int,
            stopping: threading.Event, drop_qos1_flood: bool = False) -> bool:
        """Queue ``item`` (``size`` bytes) for ``device``; False if it was not queued.

        QoS 0: dropped (counted) when over its share, never waits. QoS 1 and 2: with
        ``drop_qos1_flood`` dropped (counted) when the device has its QoS 1 share queued;
        otherwise wait for room; give up only when ``stopping`` is set (the message,
        unacknowledged, stays with the broker, which re-sends it to the next session)."""
        with self._lock:
            if qos == 0:
                reason = self._qos0_refusal(device, size)
                if reason is not None:
                    self._count_drop(device, reason)
                    return False
            elif drop_qos1_flood and (len(self._queues.get(device, ()))
                                      >= self.limits.device_qos1_messages):
                self.dropped_qos1 += 1
                self._count_drop(device, DEVICE_FLOOD)
                return False
            elif self._full(size):
                self.waits += 1
                while self._full(size):
                    if stopping.is_set():
                        return False
                    self._not_full.wait(PUT_POLL_S)
            if device not in self._queues:
                self._queues[device] = deque()
                self._turns.append(device)
            self._queues[device].append((item, size, qos))
            self._messages += 1
            self._bytes += size
            if qos == 0:
                self._qos0_by_device[device] = self._qos0_by_device.get(device, 0) + 1
            self._not_empty.notify()
            return True

    def get(self, timeout: float) -> T:
        """The next item, round-robin by device; raise queue.Empty after ``timeout`` s."""
        with self._lock:
            if not self._turns and not self._not_empty.wait_for(lambda: bool(self._turns),
                                                                timeout):
                raise queue.Empty
            device = self._turns.popleft()
            pending = self._queues[device]
            item, size, qos = pending.popleft()
            if pending:
                self._turns.append(device)  # its next message waits for every other device
            else:
                del self._queues[device]
            self._messages -= 1
            self._bytes -= size
            if qos == 0:
                left = self._qos0_by_device[device] - 1
                if left:
                    self._qos0_by_device[device] = left
                else:
                    del self._qos0_by_device[device]
            self._not_full.notify()
            return item

    def empty(self) -> bool:
        """Whether nothing is queued."""
        with self._lock:
            return not self._turns

    def __len__(self) -> int:
        with self._lock:
            return self._messages

    def drops(self) -> dict[tuple[str, str], int]:
        """Messages dropped so far by (device, reason), since start."""
        with self._lock:
            return dict(self._drops)

    def _full(self, size: int) -> bool:
        # An empty inbox takes any one message, so a message larger than max_bytes cannot wait
        # forever (the decoder refuses it as too large afterwards).
        return self._messages > 0 and (
            self._messages >= self.limits.max_messages
            or self._bytes + size > self.limits.max_bytes
        )

    def _qos0_refusal(self, device: str, size: int) -> str | None:
        if self._qos0_by_device.get(device, 0) >= self.limits.device_qos0_messages:
            return DEVICE_QUOTA
        if (self._messages >= self.limits.max_messages // 2
                or self._bytes + size > self.limits.max_bytes // 2):
            return INBOX_FULL
        return None

    def _count_drop(self, device: str, reason: str) -> None:
        self.dropped += 1
        key = (device, reason)
        if key not in self._drops and len(self._drops) >= MAX_DROP_DEVICES:
            key = (OTHER_DEVICES, reason)
        self._drops[key] = self._drops.get(key, 0) + 1
