"""The live analyzer: MQTT in, validation, per-device pipeline, InfluxDB out.

Wiring, in order: ``init_storage`` (database exists), ``start_mqtt`` (persistent session,
manual acknowledgements), ``run`` (one worker thread owns every piece of mutable state).

Nothing accepted is lost: a frame's MQTT message is acknowledged only after InfluxDB stored
its point. While InfluxDB is down the worker retries with capped backoff and acknowledges
nothing, so the broker keeps the frames (persistent session, QoS 1). After a reconnect the
broker re-sends what was unacknowledged; duplicates are dropped on (device, seq, capture
time). Malformed, oversized or mismatched messages are counted, logged and acknowledged
(dropped); so is a message whose handling raised anything else (``handler_errors``): one
message never stops the worker. Decoded frames are checked further
(``analyzer.ingest.plausibility``): an inconsistent one is dropped as malformed, one with an
implausible capture time is kept unscored at its arrival time (``implausible_frame``), never at
the time it claims (``analyzer.store.outside_window``). A frame that
waits in the reorder buffer for a missing predecessor is stored (unscored) and acknowledged at
once, so waiting frames never fill the broker's in-flight window; its score is written when it
is released (the gap filled, or given up after ``reorder_wait_s``). Points InfluxDB refuses
are set aside (``RefusedPoints``), counted and acknowledged, never retried forever. A device
silent for ``forget_device_after_s`` has its state freed.

With ``journal_path`` set, each device's analysis state is saved after every stored batch,
before its acknowledgements (the payloads of the frames its pipeline took, and a checkpoint of
the state every ``journal_checkpoint_frames``), and restored at start-up
(``analyzer.ingest.journal``): a restarted analyzer scores and tracks events exactly as if it
had not stopped.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from influxdb_client import Point, WritePrecision

from analyzer.acoustics import load_site
from analyzer.config import AnalyzerConfig
from analyzer.errors import AnalyzerError, InfluxUnavailable
from analyzer.ingest.device import DeviceAnalysis, DeviceOutput
from analyzer.ingest.frame_check import DEVICE_MISMATCH, Rejection, check_frame
from analyzer.ingest.inbox import INVALID_TOPICS, OTHER_DEVICES, Inbox, InboxLimits
from analyzer.ingest.keeper import STORED_FRAMES_PER_DEVICE, JournalKeeper
from analyzer.ingest.messages import parse_heartbeat, parse_status
from analyzer.ingest.ordering import ReorderBuffer
from analyzer.ingest.partitions import Ownership
from analyzer.ingest.plausibility import time_problem
from analyzer.ingest.state import Ack, AnalyzerCounters, DeviceState, Key, StoredFrames, iso_time
from analyzer.ordinance import EvidenceChain
from analyzer.store import (
    InfluxClient,
    RefusedPoints,
    health_point,
    level_line,
    stats_point,
    status_point,
    write_with_retry,
)
from analyzer.store.checks import bearing_check_point
from analyzer.store.outside_window import implausible_frame_point
from sensor.bearing_report import REPORT_KIND, decode_report
from sensor.confirmations import encode_stored, stored_topic
from sensor.errors import ConfigError, WireError, WireReason
from sensor.features import HOP_S
from sensor.publisher import connect_async, make_client
from sensor.wire import TOPIC_ROOT, Frame, device_from_topic

log = logging.getLogger(__name__)

SUBSCRIPTIONS = [
    (f"{TOPIC_ROOT}/frames/+", 1),
    (f"{TOPIC_ROOT}/heartbeat/+", 1),
    (f"{TOPIC_ROOT}/status/+", 1),
    (f"{TOPIC_ROOT}/{REPORT_KIND}/+", 1),
]
FLUSH_AFTER_S = 0.5
# A batch is written once the inbox is empty and the batch this old: at a steady trickle
# (frames arriving a few ms apart) the inbox is empty after nearly every frame, and a write,
# a journal save and their acknowledgements per frame cost more CPU than the frame's analysis
# (docs/SCALE.md, "Analyzer CPU per frame"). It adds at most this much to a frame's latency.
FLUSH_LINGER_S = 0.1
HOUSEKEEPING_EVERY_S = 1.0
IMPLAUSIBLE_LOG_EVERY = 600  # per device: log the first implausible frame, then every 600th
HANDLER_TRACEBACKS = 10  # full tracebacks for the first unexpected errors, one line after
WORKER_ERROR_BACKOFF_S = 1.0
# Every frame must fit the detector: a dog score per fixed 20 ms step of each second. Judged
# against these constants, not the device's first frame, so one bad frame cannot decide how
# the device's later frames are treated.
FRAME_SHAPE = (round(1.0 / HOP_S), HOP_S)  # the CNN scores every 20 ms step of a second
INBOX_LIMITS = InboxLimits()  # the queue from the MQTT thread to the worker (ingest/inbox.py)
MAX_DROP_POINTS = 10  # analyzer_drops points of single devices per stats interval
FORGETS_PER_PASS = 50  # silent devices freed per housekeeping pass (each second)


class Analyzer:
    """Subscribes to every device and stores levels, events and health in InfluxDB.

    ``clock`` (monotonic seconds) times batches, stats, reorder waits and idle devices.
    """

    def __init__(self, config: AnalyzerConfig, clock: Callable[[], float] = time.monotonic,
                 client: Any = None) -> None:
        self.config = config
        self._owned = Ownership(config.share)  # the fleet's partitions it serves
        self._drop_flood = config.confirm_stored and config.drop_flood
        self.counters = AnalyzerCounters()
        self.influx = InfluxClient(config.influx)
        self.refused = RefusedPoints(config.influx.refused_points_file,
                                     config.influx.refused_points_max_bytes)
        self.stop_event = threading.Event()
        # Set once the broker has granted the subscriptions (SUBACK), not merely on CONNACK:
        # a frame published between the two would otherwise reach no one.
        self.connected = threading.Event()
        self._clock = clock
        self._failure: str | None = None
        self._inbox: Inbox[tuple[int, mqtt.MQTTMessage]] = Inbox(INBOX_LIMITS)
        self.rejections: dict[str, int] = {}  # frames refused, by reason (frame_check.py)
        self._generation = 0
        self._devices: dict[str, DeviceState] = {}
        self._chain = EvidenceChain()
        # Saves and resumes each device's analysis state (analyzer.ingest.keeper)
        self._keeper = JournalKeeper(config, self._devices, self.counters, clock)
        self._unstored: dict[Key, list[Ack]] = {}
        self._unstored_times: set[tuple[str, int]] = set()  # (device, capture ns) of those
        self._ack_placed = False
        self._batch: list[str] = []  # line protocol
        self._batch_keys: list[Key | None] = []  # the frame each line stores, if any
        self._batch_bytes = 0
        self._batch_acks: list[Ack] = []
        self._batch_confirms: dict[str, set[int]] = {}  # device: seqs done with, not stored now
        self._batch_started = 0.0
        self._linger_until = 0.0  # time.monotonic(): real time, whatever clock is passed in
        self._last_arrival_ns = 0
        self._drops_written: dict[tuple[str, str], int] = {}  # inbox drops already written
        self._next_stats = 0.0
        self._next_housekeeping = 0.0
        self._worker = threading.Thread(target=self._run, name="analyzer-worker", daemon=True)
        self._owns_client = client is None
        if client is not None:
            # Another input hands messages to on_message and takes ack/publish calls (one
            # partition of the clustered broker: analyzer.ingest.cluster).
            self.client = client
            return
        self.client = make_client(config.client_id, config.mqtt, persistent=True)
        self.client.manual_ack_set(True)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message

    def on_message(self, message: Any) -> None:
        """Take one message from an input other than the MQTT client (the same path)."""
        self._on_message(self.client, None, message)

    # --- start-up ---------------------------------------------------------------------------
    def start(self) -> None:
        """Connect to the broker and start the worker (which first makes sure the database
        exists, retrying while InfluxDB is unreachable)."""
        if self._owns_client:
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
        self._count_inbox_drops()
        log.info("analyzer stopped: %s", self.summary())

    @property
    def failure(self) -> str | None:
        """Why the worker thread ended before :meth:`stop` was called, or None while it runs
        (``barkwatch analyzer run`` then exits with status 1 so that systemd restarts it)."""
        if self._failure is not None:
            return self._failure
        if self._worker.ident is not None and not self._worker.is_alive() \
                and not self.stop_event.is_set():
            return "the worker thread ended"
        return None

    @property
    def tracked_devices(self) -> list[str]:
        """Devices whose analysis state is held (seen within ``forget_device_after_s``)."""
        return list(self._devices)

    def summary(self) -> str:
        """The counters on one line."""
        return ", ".join(f"{k}={v}" for k, v in asdict(self.counters).items() if v)

    # --- paho callbacks (network thread): hand on and return ---------------------------------
    def _on_connect(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        if not self.client.link.connack(reason):  # logged there, with the reason
            return
        self._generation += 1
        client.subscribe(SUBSCRIPTIONS)
        log.info(
            "analyzer connected to %s:%d (session present: %s; partition %s)",
            self.config.mqtt.host,
            self.config.mqtt.port,
            flags.session_present,
            self._owned,
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
        # Logged by the link: a lost connection, or why an attempt failed.
        if self.client.link.disconnected(reason, stopping=self.stop_event.is_set()):
            self.counters.broker_disconnects += 1  # a lone int update: safe across threads

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        # Bounded, and fair by device (analyzer.ingest.inbox): QoS 0 beyond a device's share is
        # dropped and counted; QoS 1, already acknowledged to its sensor by the broker, is never
        # dropped: this waits for room instead and the socket is not read meanwhile.
        # Only a valid device id names a queue (and an analyzer_drops tag): every topic that
        # is not one shares one queue and one QoS 0 share (refused by _dispatch as bad_topic).
        try:
            device = device_from_topic(message.topic)[1]
        except (UnicodeDecodeError, WireError):
            device = INVALID_TOPICS
        queued = self._inbox.put((self._generation, message), device,
                                 len(message.payload) + len(device), message.qos,
                                 self.stop_event, drop_qos1_flood=self._drop_flood)
        if not queued and message.qos > 0 and not self.stop_event.is_set():
            # Beyond the device's share (a flood): let the broker forget it now. It is not
            # confirmed, so a real sensor sends it again (sensor/confirmations.py).
            client.ack(message.mid, message.qos)

    # --- worker ------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._init_storage()
            self._keeper.resume_devices()
            while not self.stop_event.is_set():
                try:
                    self._step()
                except Exception as exc:  # the worker must outlive any one failure
                    self.counters.worker_errors += 1
                    log.error("analyzer worker: %s: %s; going on in %.0f s",
                              type(exc).__name__, exc, WORKER_ERROR_BACKOFF_S, exc_info=True)
                    self.stop_event.wait(WORKER_ERROR_BACKOFF_S)
            if self._batch or self._batch_acks:
                self._flush()
            self._keeper.close()
            self.influx.close()  # the worker's kept connection to InfluxDB
        except BaseException as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
            log.critical("analyzer worker died: %s", self._failure, exc_info=True)

    def _step(self) -> None:
        wait_s = 0.1
        if self._batch_acks or self._batch:  # wake for the batch's write when it has lingered
            wait_s = min(wait_s, max(0.0, self._linger_until - time.monotonic()))
        try:
            generation, message = self._inbox.get(timeout=wait_s)
        except queue.Empty:
            pass
        else:
            self._handle(generation, message)
        now = self._clock()
        if (self._batch_acks or self._batch) and (
            (self._inbox.empty() and time.monotonic() >= self._linger_until)
            or now - self._batch_started >= FLUSH_AFTER_S
            or len(self._batch) >= self.config.influx.batch_points
            or self._batch_bytes >= self.config.influx.batch_bytes
        ):
            self._flush()
        if now >= self._next_housekeeping:
            self._housekeep(now)
        if now >= self._next_stats:
            self._write_stats(now)

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

    def _analysis_of(self, device: str, state: DeviceState, first_frame_ns: int
                     ) -> DeviceAnalysis:
        """The device's analysis state: made (and primed) on its first frame, or restored
        from the journal's saved state on its first use after a restart."""
        if state.analysis is not None:
            return state.analysis
        saved, state.resume = state.resume, None
        if saved is None or saved.fed_end_ns is None:
            state.analysis = self._new_device(device, first_frame_ns)
            return state.analysis
        state.analysis = self._new_device(device, saved.fed_end_ns)
        self._keeper.restore(device, saved, state.analysis)
        return state.analysis

    def _confirm_later(self, device: str, seq: int) -> None:
        """Confirm ``seq`` to ``device``'s sensor with the next stored batch."""
        if self.config.confirm_stored:
            self._batch_confirms.setdefault(device, set()).add(seq)

    def _publish_confirmations(self, stored: list[Key]) -> None:
        """Tell each sensor which of its frames are stored (or refused for good), so that it
        deletes them from its outbox (sensor/confirmations.py). After the journal's save and
        InfluxDB's write: a confirmed frame is never needed again."""
        confirms = self._batch_confirms
        self._batch_confirms = {}
        if not self.config.confirm_stored:
            return
        for device, seq, _ in stored:
            confirms.setdefault(device, set()).add(seq)
        for device, seqs in confirms.items():
            for payload in encode_stored(seqs):
                self.client.publish(stored_topic(device), payload, qos=1)
        self.counters.confirmations_sent += len(confirms)

    def _ack_later(self, ack: Ack) -> None:
        self._ack_placed = True
        if ack[2] == 0:
            return  # QoS 0: there is nothing to acknowledge (a PUBACK would be a protocol error)
        if not self._batch and not self._batch_acks:
            self._start_batch()
        self._batch_acks.append(ack)

    def _start_batch(self) -> None:
        self._batch_started = self._clock()
        self._linger_until = time.monotonic() + FLUSH_LINGER_S

    def _add_point(self, point: Point, key: Key | None = None) -> None:
        line = point.to_line_protocol()
        if not line:
            return  # a point without fields (e.g. an empty heartbeat) stores nothing
        self._add_line(line, key)

    def _add_line(self, line: str, key: Key | None = None) -> None:
        if not self._batch and not self._batch_acks:
            self._start_batch()
        self._batch.append(line)
        self._batch_keys.append(key)
        self._batch_bytes += len(line) + 1

    def _handle(self, generation: int, message: mqtt.MQTTMessage) -> None:
        self.counters.received += 1
        ack = (generation, message.mid, message.qos)
        self._ack_placed = False
        try:
            self._dispatch(message, ack)
        except Exception as exc:  # one message must never stop the worker (issue 27)
            self.counters.handler_errors += 1
            topic = bytes(getattr(message, "_topic", b"")).decode(errors="replace")
            log.error("dropped a message on %r: handling it raised %s: %s", topic[:200],
                      type(exc).__name__, exc,
                      exc_info=self.counters.handler_errors <= HANDLER_TRACEBACKS)
            if not self._ack_placed:
                self._ack_later(ack)

    def _dispatch(self, message: mqtt.MQTTMessage, ack: Ack) -> None:
        try:
            kind, device = device_from_topic(message.topic)
        except WireError as exc:
            self.counters.bad_topic += 1
            log.warning("dropped message: %s", exc)
            self._ack_later(ack)
            return
        if not self._owned.owns(device):  # another analyzer's device (partitions.py)
            self.counters.other_partition += 1
            self._ack_later(ack)
            return
        payload = bytes(message.payload)
        if kind == "frames" and message.retain:
            # A retained frame is delivered again with every subscription, at each reconnect:
            # a live frame is never delivered as retained (MQTT 3.1.1, 3.3.1.3), nor one the
            # session queued, so dropping these loses nothing.
            self.counters.retained_frames += 1
            if self.counters.retained_frames % IMPLAUSIBLE_LOG_EVERY == 1:
                log.warning("dropped a retained frame on %s (frames are never retained; %d so "
                            "far)", message.topic, self.counters.retained_frames)
            self._ack_later(ack)
            return
        if kind == "frames":
            self._handle_frame(device, payload, ack)
            return
        try:
            if kind == "heartbeat":
                self._handle_heartbeat(device, payload)
            elif kind == "status":
                self._handle_status(device, payload)
            elif kind == REPORT_KIND:
                self._handle_bearing_check(device, payload)
            else:
                self.counters.bad_topic += 1
                log.warning("dropped message on unknown topic %s", message.topic)
        except AnalyzerError as exc:
            if kind == "heartbeat":
                self.counters.heartbeat_malformed += 1
            elif kind == REPORT_KIND:
                self.counters.bearing_check_malformed += 1
            else:
                self.counters.status_malformed += 1
            log.warning("dropped %s message from %s: %s", kind, device, exc)
        self._ack_later(ack)

    def _decode_frame(self, device: str, payload: bytes) -> Frame | None:
        """The frame if it is one this device could have sent; None (counted, logged) if not."""
        outcome = check_frame(device, payload, self.config.max_payload_bytes, FRAME_SHAPE)
        if not isinstance(outcome, Rejection):
            return outcome
        if outcome.seq is not None:  # refused for good: its sensor need not send it again
            self._confirm_later(device, outcome.seq)
        self.rejections[outcome.reason] = self.rejections.get(outcome.reason, 0) + 1
        if outcome.reason == WireReason.TOO_LARGE:
            self.counters.oversize += 1
        elif outcome.reason == DEVICE_MISMATCH:
            self.counters.device_mismatch += 1
        else:
            self.counters.malformed += 1
        log.warning("dropped frame on the topic of %s (%s): %s", device, outcome.reason,
                    outcome.message)
        return None

    def _handle_frame(self, device: str, payload: bytes, ack: Ack) -> None:
        frame = self._decode_frame(device, payload)
        if frame is None:
            self._ack_later(ack)
            return
        state = self._devices.get(device)
        if state is None:  # per-device state is made only for a frame that passed every check
            state = self._devices[device] = DeviceState(
                ReorderBuffer(self.config.reorder_window_frames, self.config.reorder_wait_s),
                StoredFrames(STORED_FRAMES_PER_DEVICE),
                self._clock(),
            )
        state.last_seen_s = self._clock()
        self._keeper.touched.add(device)
        key = (device, frame.seq, frame.capture_ns)
        if key[1:] in state.stored:
            self.counters.duplicates += 1
            self._confirm_later(device, frame.seq)  # its sensor may have missed the first
            self._ack_later(ack)
            return
        if key in self._unstored:  # a copy is on its way to storage: ack both once stored
            self.counters.duplicates += 1
            self._unstored[key].append(ack)
            self._ack_placed = True
            return
        if state.stored.has_time(frame.capture_ns) or key[::2] in self._unstored_times:
            # Another frame (another seq) at a capture time already stored: its level point
            # would overwrite that one's in InfluxDB (same series and time), so it is refused.
            self.counters.duplicate_time += 1
            if self.counters.duplicate_time % IMPLAUSIBLE_LOG_EVERY == 1:
                log.warning("dropped frame %d of %s: a frame captured at %s (%d ns) is already "
                            "stored (%d such frame(s) so far)", frame.seq, device,
                            iso_time(frame.capture_ns), frame.capture_ns,
                            self.counters.duplicate_time)
            self._confirm_later(device, frame.seq)  # never stored: sending it again is no use
            self._ack_later(ack)
            return
        if frame.clock_step_ns:
            self.counters.clock_steps += 1
            log.warning("%s: its wall clock stepped by %+.3f s before frame %d (capture time "
                        "counts samples: evidence keeps its order)", device,
                        frame.clock_step_ns / 1e9, frame.seq)
        time_issue = time_problem(
            frame.capture_ns,
            time.time_ns(),
            self.config.max_frame_age_s,
            self.config.max_clock_ahead_s,
        )
        if time_issue:
            self._flag_implausible_time(frame, state, time_issue)
        else:
            self._keeper.received(device, frame, payload)  # journalled if the pipeline takes it
            self._order_and_score(frame, state)
        # Last: the ack waits for the point queued above (acknowledged when it is stored).
        self._unstored[key] = [ack]
        self._unstored_times.add(key[::2])
        self._ack_placed = True

    def _order_and_score(self, frame: Frame, state: DeviceState) -> None:
        reorder = state.reorder
        late, restarts, expected = reorder.late, reorder.restarts, reorder.next_seq
        ready = self._count_gaps(frame.device_id, reorder, reorder.push, frame, self._clock())
        if reorder.restarts > restarts:
            self.counters.sequence_restarts += 1
            log.warning(
                "%s restarted its sequence numbers: frame %d, captured at %s (%d ns), came "
                "where %s was expected and after every frame so far (a wiped outbox or a "
                "replaced sensor?); its frames are stored and scored as new ones",
                frame.device_id, frame.seq, iso_time(frame.capture_ns), frame.capture_ns, expected,
            )
        if reorder.late > late:  # older than what was already scored: store unscored
            self.counters.late_frames += 1
            self._queue_frame(frame, None, stores=True)
        elif not any(f is frame for f in ready):
            # Held for a missing predecessor: stored now, so that its MQTT message is
            # acknowledged and held frames never fill the broker's in-flight window; its
            # score is written when it is released.
            self.counters.frames_held += 1
            self._queue_frame(frame, None, stores=True)
        self._score(frame.device_id, state, ready, current=frame)

    def _count_gaps(self, device: str, reorder: ReorderBuffer,
                    release: Callable[..., list[Frame]], *args: Any) -> list[Frame]:
        """``release(*args)`` of ``reorder``, counting and logging the gaps it gave up."""
        gaps, skipped = reorder.gaps, reorder.skipped
        ready = release(*args)
        if reorder.gaps > gaps:
            self.counters.gaps_given_up += reorder.gaps - gaps
            self.counters.frames_lost += reorder.skipped - skipped
            log.warning("%s: gave up waiting for %d missing frame(s) before frame %d",
                        device, reorder.skipped - skipped, ready[0].seq if ready else -1)
        return ready

    def _score(self, device: str, state: DeviceState, ready: list[Frame],
               current: Frame | None) -> None:
        """Score ``ready`` frames in order and queue their points. ``current`` (the frame in
        hand, if among them) is stored by its point; the others were stored while they were
        held, and get their score written over."""
        for frame in ready:
            score: float | None = None
            try:
                score = self._analyse(device, state, frame)
            except Exception as exc:  # its levels are stored all the same
                self.counters.scoring_errors += 1
                log.error("frame %d of %s stored unscored: scoring raised %s: %s", frame.seq,
                          device, type(exc).__name__, exc,
                          exc_info=self.counters.scoring_errors <= HANDLER_TRACEBACKS)
            if frame is current:
                self._queue_frame(frame, score, stores=True)
            elif score is not None:
                self._queue_frame(frame, score, stores=False)

    def _analyse(self, device: str, state: DeviceState, frame: Frame) -> float:
        self._keeper.fed(device, frame)  # its payload is journalled, fed again at a restart
        output = self._analysis_of(device, state, frame.capture_ns).feed(frame)
        state.fed_end_ns = frame.end_ns
        self._store_output(output)
        return output.max_dog_score

    def _store_output(self, output: DeviceOutput) -> None:
        for point in output.points:
            self._add_point(point)
        self.counters.events_stored += output.events
        self.counters.findings_stored += output.findings
        for topic, message in output.messages:
            # allow_nan=False: NaN is not JSON; subscribers' parsers would refuse the message.
            payload = json.dumps(message, sort_keys=True, allow_nan=False)
            self.client.publish(topic, payload, qos=1, retain=True)

    def _new_device(self, device: str, first_frame_ns: int) -> DeviceAnalysis:
        """Analysis state of a device seen for the first time since start-up (or since it
        was forgotten)."""
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
        self._chain.sectors[device] = site.sector if site is not None else None
        analysis = DeviceAnalysis(device, self.config, site, self._chain)
        analysis.prime(self.influx, first_frame_ns)
        return analysis

    def _flag_implausible_time(self, frame: Frame, state: DeviceState, problem: str) -> None:
        """Keep the frame unscored, at its arrival time (``implausible_frame``, its claimed
        time a field): a time outside the window cannot be placed (see
        ``analyzer.ingest.plausibility``), and written at it would make an InfluxDB shard per
        week it claims (``analyzer.store.outside_window``)."""
        self.counters.implausible_time += 1
        state.implausible += 1
        if state.implausible == 1 or state.implausible % IMPLAUSIBLE_LOG_EVERY == 0:
            log.warning(
                "frame %d from %s: %s; kept as implausible_frame at its arrival time, not "
                "scored (%d such frame(s) from this device so far; is its clock synchronised?)",
                frame.seq,
                frame.device_id,
                problem,
                state.implausible,
            )
        point = implausible_frame_point(frame, self._arrival_ns(), problem)
        self._add_point(point, (frame.device_id, frame.seq, frame.capture_ns))

    def _arrival_ns(self) -> int:
        """The analyzer's clock, ns, never the same twice (points of one device at one time
        would overwrite each other)."""
        self._last_arrival_ns = max(time.time_ns(), self._last_arrival_ns + 1)
        return self._last_arrival_ns

    def _queue_frame(self, frame: Frame, max_dog_score: float | None, stores: bool,
                     implausible_time: bool = False) -> None:
        """Queue the frame's level point; ``stores``: this point stores the frame (its message
        is acknowledged once it is written), else it only adds the score to a stored one."""
        # Every level point carries the flag, so `WHERE implausible_time = false` keeps the
        # others (InfluxQL comparisons with a missing field are false).
        line = level_line(frame, max_dog_score, implausible_time)
        self._add_line(line, (frame.device_id, frame.seq, frame.capture_ns) if stores else None)

    def _handle_heartbeat(self, device: str, payload: bytes) -> None:
        heartbeat = parse_heartbeat(payload)
        if heartbeat.get("device_id") != device:
            self.counters.device_mismatch += 1
            raise AnalyzerError(
                f"heartbeat device id {str(heartbeat.get('device_id'))[:80]!r} disagrees with "
                "its topic"
            )
        claimed = heartbeat.get("time_ns")
        problem = None
        if isinstance(claimed, int) and not isinstance(claimed, bool) and claimed > 0:
            problem = time_problem(claimed, time.time_ns(), self.config.max_frame_age_s,
                                   self.config.max_clock_ahead_s)
        if problem:  # stored at arrival, flagged: never a shard of its own (outside_window.py)
            heartbeat = {**heartbeat, "time_ns": self._arrival_ns()}
        point = health_point(device, heartbeat).field("implausible_time", bool(problem))
        if problem:
            point.field("claimed_time_ns", claimed)
            self.counters.heartbeat_implausible_time += 1
            if self.counters.heartbeat_implausible_time % IMPLAUSIBLE_LOG_EVERY == 1:
                log.warning("heartbeat from %s: %s; stored at its arrival time with "
                            "implausible_time=true (%d such heartbeat(s) so far)", device,
                            problem, self.counters.heartbeat_implausible_time)
        self._add_point(point)
        self.counters.heartbeats += 1

    def _handle_bearing_check(self, device: str, payload: bytes) -> None:
        """Store a sensor's array check (sensor/bearing_report.py) at its capture time: the
        retained message, delivered again, overwrites its own point."""
        try:
            report = decode_report(payload)
        except WireError as exc:
            raise AnalyzerError(f"{exc} ({exc.reason})") from exc
        if report.device_id != device:
            self.counters.device_mismatch += 1
            raise AnalyzerError(f"bearing check device id {report.device_id!r} disagrees with "
                                "its topic")
        ahead_s, limit_s = (report.time_ns - time.time_ns()) / 1e9, self.config.max_clock_ahead_s
        if ahead_s > limit_s:  # a sensor's clock gone wrong: never a point in the future
            raise AnalyzerError(f"bearing check dated {ahead_s:.0f} s ahead of this clock "
                                f"(more than max_clock_ahead_s, {limit_s:.0f})")
        self._add_point(bearing_check_point(report))
        self.counters.bearing_checks += 1
        log.info("bearing check from %s: %s (measured %s, expected %.1f deg)", device,
                 "passed" if report.passed else "FAILED", report.measured_deg,
                 report.expected_deg)

    def _handle_status(self, device: str, payload: bytes) -> None:
        # Status messages carry no time: stamped with the analyzer's clock on arrival.
        self._add_point(status_point(device, parse_status(payload), time.time_ns()))
        self.counters.status_changes += 1

    def _flush(self) -> None:
        refused = write_with_retry(
            self.influx, self._batch, self.stop_event, on_retry=self._count_retry
        )
        if refused is None:
            return  # stopping: unacknowledged messages stay with the broker
        refused_at = set()
        now_ns = time.time_ns()
        for index, reason in refused:
            refused_at.add(index)
            self.refused.set_aside(self._batch[index], reason, now_ns)
        if refused:
            self.counters.points_refused += len(refused)
            self.counters.influx_rejected_batches += 1
        self._keeper.save([key for key in self._batch_keys if key is not None])
        acks = list(self._batch_acks)
        for index, key in enumerate(self._batch_keys):
            if key is None:
                continue
            if index not in refused_at:  # a refused frame is set aside, not stored
                self.counters.frames_stored += 1
            acks.extend(self._unstored.pop(key, []))
            self._unstored_times.discard(key[::2])
            state = self._devices.get(key[0])
            if state is not None:  # refused ones too: a redelivered copy would be refused again
                state.stored.add(key[1:])
        for generation, mid, qos in acks:
            # Older ids died with their connection; QoS 0 messages take no acknowledgement.
            if qos > 0 and generation == self._generation:
                self.client.ack(mid, qos)
        self._publish_confirmations([key for key in self._batch_keys if key is not None])
        self._batch, self._batch_keys, self._batch_acks = [], [], []
        self._batch_bytes = 0

    def _count_retry(self) -> None:
        self.counters.influx_retries += 1

    def _housekeep(self, now: float) -> None:
        """Give up gaps that waited ``reorder_wait_s``; forget devices silent for
        ``forget_device_after_s``."""
        self._next_housekeeping = now + HOUSEKEEPING_EVERY_S
        forgotten = 0
        for device, state in list(self._devices.items()):
            reorder = state.reorder
            if reorder.waiting:
                ready = self._count_gaps(device, reorder, reorder.expire, now)
                self._score(device, state, ready, current=None)
                self._keeper.touched.add(device)
            if (now - state.last_seen_s >= self.config.forget_device_after_s
                    and forgotten < FORGETS_PER_PASS):
                # Bounded per pass: forgetting 10,511 devices at once stopped storage for
                # 25 s (issue 32, item 7); the rest go in the next passes, a second apart.
                self._forget(device, state)
                forgotten += 1

    def _forget(self, device: str, state: DeviceState) -> None:
        """Free a quiet device's state: score what still waits, close its open events. Its
        rule engine is primed from InfluxDB again if it returns (as after a restart)."""
        reorder = state.reorder
        self._score(device, state, self._count_gaps(device, reorder, reorder.release_all),
                    current=None)
        if state.analysis is not None or state.resume is not None:
            # A resumed device's open event is closed and stored too.
            self._store_output(self._analysis_of(device, state, 0).finish())
        del self._devices[device]
        self._keeper.touched.add(device)  # its saved state goes with the next save
        self.counters.devices_forgotten += 1
        log.info("%s silent for %.0f s: its analysis state is freed", device,
                 self.config.forget_device_after_s)

    def _write_stats(self, now: float) -> None:
        self._next_stats = now + self.config.stats_interval_s
        link = self.client.link.status()
        self.counters.connect_failures = link.failures
        self._count_inbox_drops()
        now_ns = time.time_ns()
        rejected = {f"rejected_{reason}": n for reason, n in sorted(self.rejections.items())}
        point = stats_point(self.config.client_id, asdict(self.counters) | rejected, now_ns)
        self._add_drop_points(now_ns)
        # Strings beside the counters: where the broker connection stands and why.
        self._add_point(point.field("broker_state", str(link.state))
                        .field("broker_error", link.error))
        log.info("analyzer: %s; %s", link, self.summary() or "idle")

    def _count_inbox_drops(self) -> None:
        self.counters.messages_dropped_flood = self._inbox.dropped - self._inbox.dropped_qos1
        self.counters.frames_dropped_flood = self._inbox.dropped_qos1

    def _add_drop_points(self, now_ns: int) -> None:
        """``analyzer_drops`` points of the QoS 0 messages the inbox dropped since the last
        stats point, by reason: one per device for the ``MAX_DROP_POINTS`` devices that
        dropped most, the rest summed under ``_other``; topics that name no valid device under
        ``_invalid``. Bounded per interval whatever arrives, and none once drops stop (a burst
        on distinct topics made a point per topic per interval forever: issue 32, item 5)."""
        totals = self._inbox.drops()
        fresh: dict[str, dict[str, int]] = {}
        for (device, reason), count in totals.items():
            new = count - self._drops_written.get((device, reason), 0)
            if new > 0:
                fresh.setdefault(device, {})[reason] = new
        self._drops_written = totals
        ranked = sorted(fresh.items(), key=lambda item: (-sum(item[1].values()), item[0]))
        by_tag: dict[str, dict[str, int]] = {}
        for rank, (device, counts) in enumerate(ranked):
            tag = device if rank < MAX_DROP_POINTS or device == INVALID_TOPICS else OTHER_DEVICES
            merged = by_tag.setdefault(tag, {})
            for reason, count in counts.items():
                merged[reason] = merged.get(reason, 0) + count
        for tag, counts in sorted(by_tag.items()):
            point = (Point("analyzer_drops").tag("analyzer", self.config.client_id)
                     .tag("device", tag).time(now_ns, WritePrecision.NS))
            for reason, count in sorted(counts.items()):
                point.field(reason, count)
            self._add_point(point)
