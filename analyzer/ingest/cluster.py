"""The analyzer's input from the clustered broker: owned partitions, leases and takeover.

The cluster (:mod:`analyzer.deploy.cluster`) stores every device's frames, heartbeats and
status in one of ``P`` partitions of the JetStream stream ``BARKWATCH`` (``bwp.<k>.<kind>.
<device>``). Each partition is served by one :class:`~analyzer.ingest.service.Analyzer`
(its own worker thread, reorder buffers, de-duplication and journal ``partition-<k>.journal``
in ``[cluster] journal_dir``), fed from the partition's durable pull consumer ``part-<k>``.

Ownership is a lease per partition in the key-value bucket ``bw-owners`` (entries expire
``lease_s`` after their last write): every second an analyzer renews its own leases and its
membership key, counts the live analyzers, takes free partitions up to its fair share
``ceil(P / analyzers)`` and hands back one beyond it. An analyzer that dies stops renewing;
``lease_s`` later its partitions are free and the others take them: each taker opens the
partition's journal (so detection resumes where the dead one saved it) and re-creates the
partition's consumer, so every message the dead one had not acknowledged is delivered again,
in stream order. The stream is a work queue: a message leaves it when acknowledged, which an
analyzer does only after InfluxDB and the journal hold it; what arrives twice is dropped on
(device, seq, capture time) by the journal's stored keys. An analyzer that cannot renew its
leases for ``lease_s / 2`` stops serving them before anyone else may take them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import ssl
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from analyzer.config import AnalyzerConfig
from analyzer.errors import AnalyzerError
from analyzer.ingest.service import Analyzer
from sensor.connection import BrokerState, LinkStatus
from sensor.wire import TOPIC_ROOT

log = logging.getLogger(__name__)

STREAM = "BARKWATCH"  # as analyzer.deploy.cluster renders it
PARTITION_ROOT = "bwp"
OWNERS_BUCKET = "bw-owners"
TICK_S = 1.0
FETCH_BATCH = 256
FETCH_WAIT_S = 1.0
BIND_WAIT_S = 30.0  # for one try at making a partition's consumer
STREAM_READY_S = 60.0
STREAM_MAX_AGE_S = 7 * 86400.0  # unstored messages older than a week are dropped
T = TypeVar("T")


class ClusterError(AnalyzerError):
    """The cluster cannot be used as configured (a message says what and where)."""


@dataclass
class ClusterMessage:
    """One stored message, shaped as the MQTT message the analyzer's worker handles."""

    topic: str
    payload: bytes
    mid: int
    qos: int = 1
    retain: bool = False

    @property
    def _topic(self) -> bytes:
        return self.topic.encode()


def topic_of(subject: str) -> str:
    """``bwp.<k>.<kind>.<device>`` as the MQTT topic the device published on."""
    parts = subject.split(".")
    if len(parts) == 4 and parts[0] == PARTITION_ROOT:
        return f"{TOPIC_ROOT}/{parts[2]}/{parts[3]}"
    return subject  # refused by the worker as a bad topic, counted


class NatsLink:
    """One NATS connection (any node; nats-py reconnects to the others) and its event loop,
    run in a thread of its own; other threads call into it with :meth:`call`."""

    def __init__(self, config: AnalyzerConfig) -> None:
        self.config = config
        self.urls = config.cluster.urls()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="nats-link",
                                        daemon=True)
        self.nc: Any = None
        self.js: Any = None
        self.disconnects = 0
        self.error = ""

    def start(self, timeout_s: float = 30.0) -> None:
        """Connect; ClusterError naming the servers when none answers within ``timeout_s``."""
        self._thread.start()
        self.call(self._connect(timeout_s), timeout_s + 5)

    async def _connect(self, timeout_s: float) -> None:
        import nats

        mqtt = self.config.mqtt
        tls = None
        if mqtt.tls_ca:
            tls = ssl.create_default_context(cafile=mqtt.tls_ca)
        elif any(url.startswith("tls://") for url in self.urls):
            raise ClusterError("config key 'cluster.servers' names tls:// servers but "
                               "'mqtt.tls_ca' (the CA that signed the nodes' certificate) "
                               "is empty")

        async def disconnected() -> None:
            self.disconnects += 1

        async def error(exc: Exception) -> None:
            text = f"{type(exc).__name__}: {exc}"
            if text != self.error:  # once per distinct error, not per retry
                log.warning("cluster connection: %s", text)
            self.error = text

        try:
            self.nc = await asyncio.wait_for(nats.connect(
                servers=self.urls, tls=tls, user=mqtt.username or None,
                password=mqtt.password(), connect_timeout=5, max_reconnect_attempts=-1,
                reconnect_time_wait=0.5, allow_reconnect=True, name=self.config.client_id,
                disconnected_cb=disconnected, error_cb=error), timeout_s)
        except Exception as exc:
            raise ClusterError(f"cannot connect to the cluster at {', '.join(self.urls)} "
                               f"within {timeout_s:.0f} s: {self.error or type(exc).__name__}"
                               ) from exc
        self.js = self.nc.jetstream()

    def call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        """Run ``coroutine`` on the link's loop and wait for its result."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()  # not left running on the loop behind the caller's back
            raise

    def soon(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Run ``coroutine`` on the link's loop without waiting (its failure is logged)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        future.add_done_callback(_log_failure)

    def close(self) -> None:
        """Close the connection and stop the loop."""
        if self.nc is not None:
            try:
                self.call(self.nc.close(), 10)
            except Exception as exc:  # closing: nothing left to lose
                log.warning("closing the cluster connection: %s", exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


def _log_failure(future: Any) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.debug("cluster call failed (a message not acknowledged is delivered again): %s",
                  future.exception())


class PartitionClient:
    """What one partition's Analyzer sees in place of its MQTT client."""

    def __init__(self, link: NatsLink) -> None:
        self._link = link
        self._pending: dict[int, Any] = {}
        self._lock = threading.Lock()
        self.link = self  # the worker asks client.link.status()

    def hold(self, mid: int, message: Any) -> None:
        with self._lock:
            self._pending[mid] = message

    def ack(self, mid: int, qos: int) -> None:
        with self._lock:
            message = self._pending.pop(mid, None)
        if message is not None:
            self._link.soon(message.ack())

    def publish(self, topic: str, payload: Any, qos: int = 0, retain: bool = False) -> None:
        # Confirmations and progress reach MQTT subscribers of the topic on every node (at
        # QoS 0: a lost confirmation makes the sensor send the frame again, a duplicate).
        data = payload.encode() if isinstance(payload, str) else bytes(payload)
        self._link.soon(self._link.nc.publish(topic.replace("/", "."), data))

    def status(self) -> LinkStatus:
        connected = self._link.nc is not None and self._link.nc.is_connected
        return LinkStatus(BrokerState.CONNECTED if connected else BrokerState.DISCONNECTED,
                          self._link.error, self._link.disconnects)

    def disconnect(self) -> None:
        """Nothing: the connection is the process's, not the partition's."""

    def loop_stop(self) -> None:
        """Nothing: see :meth:`disconnect`."""


class PartitionRunner:
    """One owned partition: its consumer, a fetching thread and its Analyzer."""

    _mids = itertools.count(1)

    def __init__(self, link: NatsLink, config: AnalyzerConfig, partition: int) -> None:
        self.partition = partition
        self._link = link
        cluster = config.cluster
        journal = (str(Path(cluster.journal_dir) / f"partition-{partition}.journal")
                   if cluster.journal_dir else "")
        self.config = replace(config, client_id=f"{config.client_id}.p{partition}",
                              journal_path=journal)
        self.client = PartitionClient(link)
        self.analyzer = Analyzer(self.config, client=self.client)
        self._stop = threading.Event()
        self._subscription: Any = None
        self._thread = threading.Thread(target=self._fetch, name=f"partition-{partition}",
                                        daemon=True)
        self.fetch_errors = 0
        self.bind_failures = 0

    def start(self) -> None:
        """Start serving: the analyzer at once, and a thread that re-creates the partition's
        consumer (every unacknowledged message is delivered again, in order), trying again
        until it is made or the partition is released, then fetches from it. The caller (the
        lease coordinator) does not wait for the cluster: while a node is gone, making a
        consumer took longer than a lease lasts."""
        self.analyzer.start()
        self._thread.start()

    async def _bind(self) -> Any:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
        from nats.js.errors import NotFoundError

        js = self._link.js
        durable = f"part-{self.partition}"
        with contextlib.suppress(NotFoundError):
            await js.delete_consumer(STREAM, durable)
        cluster = self.config.cluster
        await js.add_consumer(STREAM, ConsumerConfig(
            durable_name=durable, deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT, ack_wait=cluster.ack_wait_s,
            max_ack_pending=cluster.max_ack_pending, max_deliver=-1,
            filter_subject=f"{PARTITION_ROOT}.{self.partition}.>"))
        return await js.pull_subscribe_bind(durable=durable, stream=STREAM)

    def _fetch(self) -> None:
        import nats.errors

        started = time.monotonic()
        while self._subscription is None and not self._stop.is_set():
            try:
                self._subscription = self._link.call(self._bind(), BIND_WAIT_S)
            except Exception as exc:
                self.bind_failures += 1
                log.warning("partition %d: its consumer is not made yet (%s: %s); again in 1 s",
                            self.partition, type(exc).__name__, exc or "no answer")
                self._stop.wait(1.0)
        if self._subscription is not None:
            log.info("partition %d: consumer made in %.2f s; fetching", self.partition,
                     time.monotonic() - started)
        while not self._stop.is_set():
            try:
                messages = self._link.call(
                    self._subscription.fetch(FETCH_BATCH, timeout=FETCH_WAIT_S),
                    FETCH_WAIT_S + 30)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except Exception as exc:  # a node went away: the link reconnects; fetch again
                self.fetch_errors += 1
                log.warning("partition %d: fetching failed (%s: %s); again in 1 s",
                            self.partition, type(exc).__name__, exc)
                self._stop.wait(1.0)
                continue
            for message in messages:
                mid = next(self._mids)
                self.client.hold(mid, message)
                self.analyzer.on_message(ClusterMessage(topic_of(message.subject),
                                                        message.data, mid))

    def stop(self) -> None:
        """Stop fetching, store what is ready and save the journal; unacknowledged messages
        stay in the stream for the partition's next owner."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(FETCH_WAIT_S, BIND_WAIT_S) + 35)
        self.analyzer.stop()


class ClusterAnalyzer:
    """The analyzer process against the cluster: as :class:`Analyzer` to its caller."""

    def __init__(self, config: AnalyzerConfig, clock: Any = time.monotonic) -> None:
        if not config.cluster.urls():
            raise ClusterError("config key 'cluster.servers' is empty")
        self.config = config
        self.name = config.client_id
        self._clock = clock
        self.link = NatsLink(config)
        self.runners: dict[int, PartitionRunner] = {}
        self.takeovers = 0
        self._revisions: dict[int, int] = {}
        self._free_since: dict[int, float] = {}  # partition: when it was first seen free
        self._renewed_s = 0.0
        self.renewal_failures = 0  # renewals that failed or came too late
        self.balance_failures = 0  # looks for free partitions that failed
        self._stop = threading.Event()
        self._failure: str | None = None
        self._thread = threading.Thread(target=self._coordinate, name="cluster-leases",
                                        daemon=True)
        self._kv: Any = None

    # --- the Analyzer's interface ------------------------------------------------------------
    def start(self) -> None:
        """Connect, make the stream's lease bucket if missing, start taking partitions."""
        self.link.start()
        deadline = self._clock() + STREAM_READY_S
        while True:  # a cluster that just started elects its JetStream leader first
            try:
                self._kv = self.link.call(self._stream_and_bucket(), 30)
                break
            except Exception as exc:
                if self._clock() > deadline:
                    raise ClusterError(
                        f"the cluster at {', '.join(self.link.urls)} did not make the stream "
                        f"{STREAM} or the bucket {OWNERS_BUCKET} within {STREAM_READY_S:.0f} "
                        f"s: {type(exc).__name__}: {exc} (is JetStream on in every node?)"
                    ) from exc
                log.info("cluster not ready (%s: %s); again in 1 s", type(exc).__name__, exc)
                time.sleep(1.0)
        self._thread.start()

    def stop(self) -> None:
        """Hand back every partition (stored, journalled) and disconnect."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        for partition in sorted(set(self.runners) | set(self._revisions)):
            self._release(partition, delete_lease=True)
        self.link.close()

    @property
    def failure(self) -> str | None:
        """Why a partition's worker ended, or None while all run (``analyzer run`` exits 1)."""
        if self._failure is not None:
            return self._failure
        for runner in self.runners.values():
            if runner.analyzer.failure is not None:
                return f"partition {runner.partition}: {runner.analyzer.failure}"
        return None

    def summary(self) -> str:
        """Each served partition's counters on one line."""
        return "; ".join(f"p{k}: {r.analyzer.summary()}" for k, r in sorted(self.runners.items()))

    @property
    def owned(self) -> list[int]:
        """The partitions this analyzer serves now."""
        return sorted(self.runners)

    # --- leases ------------------------------------------------------------------------------
    async def _stream_and_bucket(self) -> Any:
        from nats.js.api import (
            KeyValueConfig,
            RetentionPolicy,
            StorageType,
            StreamConfig,
        )
        from nats.js.errors import BucketNotFoundError, NotFoundError

        js = self.link.js
        replicas = min(3, len(self.link.urls))
        try:
            await js.stream_info(STREAM)
        except NotFoundError:
            # A work queue: a message leaves once its partition's consumer acknowledged it
            # (stored in InfluxDB and the journal); until then it is on `replicas` nodes.
            await js.add_stream(StreamConfig(
                name=STREAM, subjects=[f"{PARTITION_ROOT}.>"],
                retention=RetentionPolicy.WORK_QUEUE, storage=StorageType.FILE,
                num_replicas=replicas, max_age=STREAM_MAX_AGE_S))
            log.info("stream %s made (%d replicas)", STREAM, replicas)
        try:
            return await js.key_value(OWNERS_BUCKET)
        except BucketNotFoundError:
            return await js.create_key_value(KeyValueConfig(
                bucket=OWNERS_BUCKET, history=1, ttl=self.config.cluster.lease_s,
                replicas=replicas))

    def _coordinate(self) -> None:
        """Every TICK_S: renew, look for free partitions, then serve exactly the partitions
        whose lease is held. The coroutines only read and write the bucket and return what
        they found; runners are started and stopped here alone, so a coroutine cut short by
        its time limit cannot leave a lease held and its partition unserved (a CI run's fault
        test: a take cancelled half-way, its lease renewed for minutes by an analyzer that
        did not serve it)."""
        self._renewed_s = self._clock()
        lease_s = self.config.cluster.lease_s
        while not self._stop.is_set():
            # A lease expires lease_s after the server stored its renewal, which is after this
            # moment: counting from here, the check below stops serving in time.
            started = self._clock()
            try:  # waited for as long as the leases held are still safe to serve
                revisions, lost = self.link.call(
                    self._renew(dict(self._revisions)),
                    max(lease_s / 2 - (started - self._renewed_s), TICK_S / 2))
            except Exception as exc:  # the cluster is unreachable or slow: keep trying
                self.renewal_failures += 1
                log.warning("cluster leases: renewal failed (%s: %s)",
                            type(exc).__name__, exc or "no answer")
                if self._clock() - self._renewed_s > lease_s / 2:
                    for partition in sorted(self._revisions):
                        log.error("partition %d: lease not renewed for %.1f s; stopped so "
                                  "that another analyzer may take it", partition,
                                  self._clock() - self._renewed_s)
                    self._revisions.clear()
            else:
                self._renewed_s = started
                self._revisions.update(revisions)
                for partition, holder in lost.items():
                    log.error("partition %d: its lease was taken by %s; stopped", partition,
                              holder or "another analyzer")
                    self._revisions.pop(partition, None)
                # Looking for free partitions may fail (a leader election after a node left)
                # without touching the leases held: they were renewed above.
                try:
                    taken, hand_back = self.link.call(self._balance(dict(self._revisions)), 15)
                except Exception as exc:
                    self.balance_failures += 1
                    log.warning("cluster leases: could not look for free partitions (%s: "
                                "%s); again in %.0f s", type(exc).__name__,
                                exc or "no answer", TICK_S)
                else:
                    self._revisions.update(taken)
                    if hand_back is not None:  # stored and journalled before it is freed
                        self._release(hand_back, delete_lease=True)
                        log.info("partition %d handed back (an analyzer holds less than its "
                                 "fair share)", hand_back)
            self._serve_held(started)
            self._stop.wait(TICK_S)

    def _serve_held(self, renewed: float) -> None:
        """Stop serving partitions whose lease is gone; start serving the ones held, while
        the renewal at ``renewed`` is still fresh (the rest at the next tick, after the next
        renewal: a start resumes the partition's journal)."""
        for partition in sorted(set(self.runners) - set(self._revisions)):
            self._release(partition)
        for partition in sorted(set(self._revisions) - set(self.runners)):
            if self._stop.is_set() or self._clock() - renewed > self.config.cluster.lease_s / 4:
                return
            try:
                self._take(partition)
            except Exception as exc:  # not served: free the lease at once for anyone to take
                log.error("partition %d: could not start serving it (%s: %s); lease freed",
                          partition, type(exc).__name__, exc or "no answer")
                self._release(partition, delete_lease=True)

    async def _renew(self, held: dict[int, int]) -> tuple[dict[int, int], dict[int, str]]:
        """Write this analyzer's membership and every lease in ``held`` (partition: revision);
        the new revisions, and the leases found held by another (partition: its holder)."""
        from nats.js.errors import KeyWrongLastSequenceError

        kv = self._kv
        # The value is the wall-clock time of the renewal: a member counts only while it is
        # recent, whatever the bucket still holds (a member's key outlived its analyzer once,
        # in a run with a node restarted, which would make the others hand partitions back
        # to no one).
        await kv.put(f"member.{self.name}", repr(time.time()).encode())
        revisions: dict[int, int] = {}
        lost: dict[int, str] = {}
        for partition, revision in held.items():
            key = f"p{partition}"
            try:
                revisions[partition] = await kv.update(key, self.name.encode(), last=revision)
            except KeyWrongLastSequenceError:
                holder, current = await self._holder(key)
                if holder != self.name:
                    lost[partition] = holder
                    continue
                # an earlier renewal was stored, its answer lost: the lease is still ours
                revisions[partition] = await kv.update(key, self.name.encode(), last=current)
        return revisions, lost

    async def _holder(self, key: str) -> tuple[str, int]:
        """Who holds lease ``key`` and at which revision ("" and 0 when no one does)."""
        from nats.js.errors import KeyNotFoundError

        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:  # KeyDeletedError is one
            return "", 0
        return (entry.value or b"").decode(errors="replace"), entry.revision or 0

    async def _keys(self) -> list[str]:
        """The bucket's keys, from the stream's subjects: a request to the stream's leader,
        where the client's kv.keys() makes a consumer on every call (a request to the
        cluster's metadata leader, slow and failing while one node is gone)."""
        prefix = f"$KV.{OWNERS_BUCKET}."
        info = await self.link.js.stream_info(f"KV_{OWNERS_BUCKET}",
                                              subjects_filter=prefix + ">")
        return [subject.removeprefix(prefix) for subject in info.state.subjects or {}]

    async def _free(self, partition: int) -> None:
        """Remove the lease of ``partition`` (no delete marker left, which :meth:`_keys` would
        count as a holder) so that anyone may take it now."""
        await self.link.js.purge_stream(f"KV_{OWNERS_BUCKET}",
                                        subject=f"$KV.{OWNERS_BUCKET}.p{partition}")

    async def _balance(self, held: dict[int, int]) -> tuple[dict[int, int], int | None]:
        """Leases taken on free partitions up to the fair share (partition: revision), and
        one partition of ``held`` to hand back beyond it (None: none)."""
        from nats.js.errors import KeyWrongLastSequenceError

        kv = self._kv
        keys = await self._keys()
        members = await self._live_members(kv, [k for k in keys if k.startswith("member.")])
        taken = {int(key[1:]) for key in keys if key[:1] == "p" and key[1:].isdecimal()}
        partitions = self.config.cluster.partitions
        fair = math.ceil(partitions / members)
        now = self._clock()
        mine = dict(held)
        for partition in range(partitions):
            if partition in taken or partition in mine:
                self._free_since.pop(partition, None)
                continue
            free_s = now - self._free_since.setdefault(partition, now)
            # Up to the fair share; beyond it only a partition nobody took for lease_s, so
            # that no partition stays unserved whatever the count of members says.
            if len(mine) >= fair and free_s < self.config.cluster.lease_s:
                continue
            try:
                mine[partition] = await kv.create(f"p{partition}", self.name.encode())
            except KeyWrongLastSequenceError:
                continue  # another analyzer was first
            self._free_since.pop(partition, None)
        others_hold = len(taken - set(mine))
        hand_back = None
        if len(mine) > fair and others_hold < (members - 1) * fair:
            # An analyzer joined (another holds less than its share): hand one back a second.
            hand_back = max(held) if held else None
        return {k: v for k, v in mine.items() if k not in held}, hand_back

    async def _live_members(self, kv: Any, keys: list[str]) -> int:
        """Members whose last renewal is under ``lease_s`` old (this one at least)."""
        live = {self.name}
        for key in keys:
            try:
                entry = await kv.get(key)
                if time.time() - float(entry.value or b"0") < self.config.cluster.lease_s:
                    live.add(key.removeprefix("member."))
            except Exception:  # gone meanwhile, or not a time: not live
                continue
        return len(live)

    def _take(self, partition: int) -> None:
        started = self._clock()
        runner = PartitionRunner(self.link, self.config, partition)
        runner.start()
        self.runners[partition] = runner
        self.takeovers += 1
        log.info("partition %d taken (%.2f s to start)", partition, self._clock() - started)

    def _release(self, partition: int, delete_lease: bool = False) -> None:
        """Stop serving ``partition`` (stored, journalled); ``delete_lease``: free it now
        rather than when its lease expires."""
        runner = self.runners.pop(partition, None)
        if runner is not None:
            runner.stop()
        if delete_lease and self._revisions.pop(partition, None) is not None:
            try:
                self.link.call(self._free(partition), 10)
            except Exception as exc:  # it expires after lease_s all the same
                log.warning("partition %d: lease not deleted (%s); it expires", partition, exc)
