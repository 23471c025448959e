"""The live analyzer: MQTT in, validation, per-device pipeline, InfluxDB out.

Wiring, in order: ``init_storage`` (database exists), ``start_mqtt`` (persistent session,
manual acknowledgements), ``run`` (one worker thread owns every piece of mutable state).

Nothing accepted is lost: a frame's MQTT message is acknowledged only after InfluxDB stored
its point. While InfluxDB is down the worker retries with capped backoff and acknowledges
nothing, so the broker keeps the frames (persistent session, QoS 1). After a reconnect the
broker re-sends what was unacknowledged; duplicates are dropped on (device, seq). Malformed,
oversized or mismatched messages are counted, logged and acknowledged (dropped); the loop
keeps going. Decoded frames are checked further (``analyzer.ingest.plausibility``): an inconsistent
one is dropped as malformed, one with an implausible capture time is stored flagged
(``implausible_time``) and not scored.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from influxdb_client import Point

from analyzer.acoustics.site import load_site
from analyzer.config import AnalyzerConfig
from analyzer.detect.pipeline import ReorderBuffer
from analyzer.errors import AnalyzerError, InfluxRejected, InfluxUnavailable
from analyzer.ingest.device import DeviceAnalysis
from analyzer.ingest.plausibility import frame_problem, shape_problem, time_problem
from analyzer.ordinance.evidence import EvidenceChain
from analyzer.store.influx import (
    InfluxClient,
    health_point,
    level_point,
    stats_point,
    status_point,
    write_with_retry,
)
from sensor.errors import ConfigError, WireError
from sensor.publisher import connect_async, make_client
from sensor.wire import TOPIC_ROOT, Frame, decode_frame, device_from_topic

log = logging.getLogger(__name__)

SUBSCRIPTIONS = [
    (f"{TOPIC_ROOT}/frames/+", 1),
    (f"{TOPIC_ROOT}/heartbeat/+", 1),
    (f"{TOPIC_ROOT}/status/+", 1),
]
STORED_SEQS_PER_DEVICE = 100_000
FLUSH_AFTER_S = 0.5
IMPLAUSIBLE_LOG_EVERY = 600  # per device: log the first implausible frame, then every 600th


@dataclass
class AnalyzerCounters:
    """Everything the analyzer counts; written as ``analyzer_stats`` and logged."""

    received: int = 0
    frames_stored: int = 0
    events_stored: int = 0
    findings_stored: int = 0
    duplicates: int = 0
    malformed: int = 0
    oversize: int = 0
    device_mismatch: int = 0
    implausible_time: int = 0
    bad_topic: int = 0
    late_frames: int = 0
    heartbeats: int = 0
    heartbeat_malformed: int = 0
    status_changes: int = 0
    influx_retries: int = 0
    influx_rejected_batches: int = 0


Ack = tuple[int, int]  # (connection generation, MQTT message id)
Key = tuple[str, int]  # (device id, sequence number)


class _StoredSeqs:
    """Sequence numbers already stored, per device, bounded (oldest forgotten first)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seqs: dict[str, set[int]] = defaultdict(set)

    def __contains__(self, key: Key) -> bool:
        return key[1] in self._seqs[key[0]]

    def add(self, key: Key) -> None:
        seqs = self._seqs[key[0]]
        seqs.add(key[1])
        if len(seqs) > self.limit:
            for old in sorted(seqs)[: len(seqs) - self.limit]:
                seqs.discard(old)


class Analyzer:
    """Subscribes to every device and stores levels, events and health in InfluxDB."""

    def __init__(self, config: AnalyzerConfig) -> None:
        self.config = config
        self.counters = AnalyzerCounters()
        self.influx = InfluxClient(config.influx)
        self.stop_event = threading.Event()
        # Set once the broker has granted the subscriptions (SUBACK), not merely on CONNACK:
        # a frame published between the two would otherwise reach no one.
        self.connected = threading.Event()
        self._inbox: queue.Queue[tuple[int, mqtt.MQTTMessage]] = queue.Queue()
        self._generation = 0
        self._devices: dict[str, DeviceAnalysis] = {}
        self._chain = EvidenceChain()
        self._reorder: dict[str, ReorderBuffer] = {}
        self._stored = _StoredSeqs(STORED_SEQS_PER_DEVICE)
        self._shapes: dict[str, tuple[int, float]] = {}  # device -> (mel bands, step s)
        self._implausible: dict[str, int] = defaultdict(int)
        self._unstored: dict[Key, list[Ack]] = {}
        self._batch: list[Point] = []
        self._batch_keys: list[Key] = []
        self._batch_acks: list[Ack] = []
        self._batch_started = 0.0
        self._next_stats = 0.0
        self._worker = threading.Thread(target=self._run, name="analyzer-worker", daemon=True)
        self.client = make_client(config.client_id, config.mqtt, persistent=True)
        self.client.manual_ack_set(True)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message

    # --- start-up ---------------------------------------------------------------------------
    def start(self) -> None:
        """Connect to the broker and start the worker (which first makes sure the database
        exists, retrying while InfluxDB is unreachable)."""
        connect_async(self.client, self.config.mqtt, persistent=True)
        self.client.loop_start()
        self._worker.start()

    def stop(self) -> None:
        """Store what is ready, then disconnect. Unstored frames stay with the broker."""
        self.stop_event.set()
        if self._worker.is_alive():
            self._worker.join(timeout=30)
        self.client.disconnect()
        self.client.loop_stop()
        log.info("analyzer stopped: %s", self.summary())

    def summary(self) -> str:
        """The counters on one line."""
        return ", ".join(f"{k}={v}" for k, v in asdict(self.counters).items() if v)

    # --- paho callbacks (network thread): hand on and return ---------------------------------
    def _on_connect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        if reason.is_failure:
            log.error("broker refused the analyzer: %s", reason)
            return
        self._generation += 1
        client.subscribe(SUBSCRIPTIONS)
        log.info(
            "analyzer connected to %s:%d (session present: %s)",
            self.config.mqtt.host,
            self.config.mqtt.port,
            flags.session_present,
        )

    def _on_subscribe(
        self, client: mqtt.Client, userdata: Any, mid: int, reasons: Any, properties: Any
    ) -> None:
        refused = [str(r) for r in reasons if r.is_failure]
        if refused:
            log.error("broker refused the analyzer's subscriptions %s: %s", SUBSCRIPTIONS,
                      ", ".join(refused))
            return
        self.connected.set()

    def _on_disconnect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        self.connected.clear()
        if not self.stop_event.is_set():
            log.warning("analyzer lost the broker (%s); reconnecting with backoff", reason)

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        # Bounded by the broker's in-flight window: nothing is acknowledged before it is stored.
        self._inbox.put((self._generation, message))

    # --- worker ------------------------------------------------------------------------------
    def _run(self) -> None:
        self._init_storage()
        while not self.stop_event.is_set():
            try:
                generation, message = self._inbox.get(timeout=0.1)
            except queue.Empty:
                pass
            else:
                self._handle(generation, message)
            if self._batch_acks or self._batch:
                due = time.monotonic() - self._batch_started >= FLUSH_AFTER_S
                if (
                    self._inbox.empty()
                    or due
                    or len(self._batch) >= self.config.influx.batch_points
                ):
                    self._flush()
            if time.monotonic() >= self._next_stats:
                self._write_stats()
        if self._batch or self._batch_acks:
            self._flush()

    def _init_storage(self) -> None:
        delay = 0.1
        while not self.stop_event.is_set():
            try:
                self.influx.create_database()
                return
            except InfluxUnavailable as exc:
                log.warning("%s; retrying in %.1f s", exc, delay)
                self.stop_event.wait(delay)
                delay = min(delay * 2, self.config.influx.retry_max_s)

    def _ack_later(self, ack: Ack) -> None:
        if not self._batch and not self._batch_acks:
            self._batch_started = time.monotonic()
        self._batch_acks.append(ack)

    def _add_points(self, points: list[Point]) -> None:
        if not self._batch and not self._batch_acks:
            self._batch_started = time.monotonic()
        self._batch.extend(points)

    def _handle(self, generation: int, message: mqtt.MQTTMessage) -> None:
        self.counters.received += 1
        ack = (generation, message.mid)
        try:
            kind, device = device_from_topic(message.topic)
        except WireError as exc:
            self.counters.bad_topic += 1
            log.warning("dropped message: %s", exc)
            self._ack_later(ack)
            return
        try:
            if kind == "frames":
                self._handle_frame(device, bytes(message.payload), ack)
                return
            if kind == "heartbeat":
                self._handle_heartbeat(device, bytes(message.payload))
            elif kind == "status":
                self._handle_status(device, bytes(message.payload))
            else:
                self.counters.bad_topic += 1
                log.warning("dropped message on unknown topic %s", message.topic)
        except AnalyzerError as exc:
            self.counters.heartbeat_malformed += 1
            log.warning("dropped %s message from %s: %s", kind, device, exc)
        self._ack_later(ack)

    def _handle_frame(self, device: str, payload: bytes, ack: Ack) -> None:
        if len(payload) > self.config.max_payload_bytes:
            self.counters.oversize += 1
            log.warning(
                "dropped frame from %s: %d bytes exceeds the limit of %d bytes",
                device,
                len(payload),
                self.config.max_payload_bytes,
            )
            self._ack_later(ack)
            return
        try:
            frame = decode_frame(payload, max_bytes=self.config.max_payload_bytes)
        except WireError as exc:
            self.counters.malformed += 1
            log.warning("dropped malformed frame on topic of %s: %s", device, exc)
            self._ack_later(ack)
            return
        if frame.device_id != device:
            self.counters.device_mismatch += 1
            log.warning(
                "dropped frame: device id %r disagrees with its topic's %r", frame.device_id, device
            )
            self._ack_later(ack)
            return
        shape = (int(frame.mel_db.shape[1]), float(frame.hop_s))
        problem = frame_problem(frame) or shape_problem(frame, self._shapes.get(device, shape))
        if problem:
            self.counters.malformed += 1
            log.warning("dropped implausible frame %d from %s: %s", frame.seq, device, problem)
            self._ack_later(ack)
            return
        key = (device, frame.seq)
        if key in self._stored:
            self.counters.duplicates += 1
            self._ack_later(ack)
            return
        if key in self._unstored:  # a copy is on its way to storage: ack both once stored
            self.counters.duplicates += 1
            self._unstored[key].append(ack)
            return
        self._unstored[key] = [ack]
        time_issue = time_problem(
            frame.capture_ns,
            time.time_ns(),
            self.config.max_frame_age_s,
            self.config.max_clock_ahead_s,
        )
        if time_issue:
            self._flag_implausible_time(frame, time_issue)
            return
        self._shapes.setdefault(device, shape)
        reorder = self._reorder.setdefault(device, ReorderBuffer(self.config.reorder_window_frames))
        late_before = reorder.late
        ready = reorder.push(frame)
        if reorder.late > late_before:  # older than what was already scored: store unscored
            self.counters.late_frames += 1
            self._queue_frame(frame, None)
        analysis = self._devices.get(device)
        if analysis is None and ready:
            analysis = self._devices[device] = self._new_device(device, ready[0].capture_ns)
        for ordered in ready:
            assert analysis is not None
            output = analysis.feed(ordered)
            self._queue_frame(ordered, output.max_dog_score)
            self._add_points(output.points)
            self.counters.events_stored += output.events
            self.counters.findings_stored += output.findings
            for topic, message in output.messages:
                self.client.publish(topic, json.dumps(message, sort_keys=True), qos=1,
                                    retain=True)

    def _new_device(self, device: str, first_frame_ns: int) -> DeviceAnalysis:
        """Analysis state of a device seen for the first time since start-up."""
        site = None
        if self.config.sites_dir:
            path = Path(self.config.sites_dir) / f"{device}.toml"
            if path.exists():
                try:
                    site = load_site(path)
                except ConfigError as exc:
                    log.error("installation record %s is unusable (%s): %s's events get no "
                              "audibility decision", path, exc, device)
            else:
                log.warning("no installation record %s: %s's events get no audibility "
                            "decision", path, device)
        self._chain.sites[device] = site.address if site is not None else ""
        analysis = DeviceAnalysis(device, self.config, site, self._chain)
        analysis.prime(self.influx, first_frame_ns)
        return analysis

    def _flag_implausible_time(self, frame: Frame, problem: str) -> None:
        """Store the frame flagged and unscored: its time cannot be placed (see
        ``analyzer.ingest.plausibility``)."""
        self.counters.implausible_time += 1
        seen = self._implausible[frame.device_id] = self._implausible[frame.device_id] + 1
        if seen == 1 or seen % IMPLAUSIBLE_LOG_EVERY == 0:
            log.warning(
                "frame %d from %s: %s; stored with implausible_time=true, not scored "
                "(%d such frame(s) from this device so far; is its clock synchronised?)",
                frame.seq,
                frame.device_id,
                problem,
                seen,
            )
        self._queue_frame(frame, None, implausible_time=True)

    def _queue_frame(
        self, frame: Frame, max_dog_score: float | None, implausible_time: bool = False
    ) -> None:
        point = level_point(frame, max_dog_score)
        # Every level point carries the flag, so `WHERE implausible_time = false` keeps the
        # others (InfluxQL comparisons with a missing field are false).
        point.field("implausible_time", implausible_time)
        self._add_points([point])
        self._batch_keys.append((frame.device_id, frame.seq))

    def _handle_heartbeat(self, device: str, payload: bytes) -> None:
        try:
            heartbeat = json.loads(payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise AnalyzerError(f"heartbeat is not JSON: {exc}") from exc
        if not isinstance(heartbeat, dict):
            raise AnalyzerError("heartbeat is not a JSON object")
        if heartbeat.get("device_id") != device:
            self.counters.device_mismatch += 1
            raise AnalyzerError(
                f"heartbeat device id {heartbeat.get('device_id')!r} disagrees with its topic"
            )
        self._add_points([health_point(device, heartbeat)])
        self.counters.heartbeats += 1

    def _handle_status(self, device: str, payload: bytes) -> None:
        text = payload.decode(errors="replace").strip()
        if text not in ("online", "offline"):
            raise AnalyzerError(f"status {text[:40]!r} is neither 'online' nor 'offline'")
        # Status messages carry no time: stamped with the analyzer's clock on arrival.
        self._add_points([status_point(device, text == "online", time.time_ns())])
        self.counters.status_changes += 1

    def _flush(self) -> None:
        lines = [p.to_line_protocol() for p in self._batch]
        try:
            stored = write_with_retry(
                self.influx, lines, self.stop_event, on_retry=self._count_retry
            )
        except InfluxRejected as exc:
            # InfluxDB 1.x stores the valid points of a partially refused batch.
            self.counters.influx_rejected_batches += 1
            log.error("InfluxDB refused part of a batch of %d points: %s", len(lines), exc)
            stored = True
        if not stored:
            return  # stopping: unacknowledged messages stay with the broker
        self.counters.frames_stored += len(self._batch_keys)
        acks = list(self._batch_acks)
        for key in self._batch_keys:
            acks.extend(self._unstored.pop(key, []))
            self._stored.add(key)
        for generation, mid in acks:
            if generation == self._generation:  # older ids died with their connection
                self.client.ack(mid, 1)
        self._batch, self._batch_keys, self._batch_acks = [], [], []

    def _count_retry(self) -> None:
        self.counters.influx_retries += 1

    def _write_stats(self) -> None:
        self._next_stats = time.monotonic() + self.config.stats_interval_s
        self._add_points(
            [stats_point(self.config.client_id, asdict(self.counters), time.time_ns())]
        )
        log.info("analyzer: %s", self.summary() or "idle")
