"""Replay audio through real processes while killing them, and compare with a clean run.

One run: a real Mosquitto (persistence on, from ``broker_config/``) and InfluxDB, the live
analyzer (``barkwatch analyzer run``) and the sensor (``barkwatch-sensor run --input``, the
file capture path), all child processes. The sensor replays a recording faster than real time;
the run's clock is the sensor's progress: the next sequence number in its outbox, which is
the number of whole seconds it has measured. At seeded random moments of that clock one
process gets SIGKILL, stays dead for a seeded random while and is started again; faults come
one at a time. A killed sensor is restarted on the rest of the recording from the second its
outbox reached, stamped with that second's capture time (a real microphone would lose the
audio of its down time; the replay goes on where the outbox stopped, so that the outcome can
be compared). Its outbox must pass SQLite's integrity check after every kill.

A tap (one more MQTT client with a persistent session, like the analyzer's) keeps every
frame the sensor published, by sequence number. The reference run publishes exactly those
frames, in order, into a fresh broker, InfluxDB and analyzer with nothing killed: an
uninterrupted run over the same measurements. (Frames next to a sensor restart differ from
those of an unbroken replay: the restarted sensor starts its filters and networks afresh, as a
real one would. The reference therefore takes the sensor's frames as they were.) Both runs
must store every frame once, with the same scores, the same events and evidence windows, and
every window must verify (``barkwatch findings recompute``'s code).
"""

from __future__ import annotations

import functools
import logging
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from analyzer.deploy.services import InfluxDB, Mosquitto
from analyzer.store import InfluxClient, InfluxSettings, recompute
from sensor.errors import WireError
from sensor.wire import decode_frame, frame_topic
from tests.faults.scene import write_from_second

log = logging.getLogger(__name__)

BIN = Path(sys.executable).parent
KINDS = ("analyzer", "influxdb", "broker", "sensor")
DEVICE = "fault-01"
START_NS = 1_780_351_200_000_000_000  # 2026-06-01T22:00:00Z, a whole second
NS = 1_000_000_000
# Replays are stamped START_NS, which may be long past: let the analyzer accept them.
MAX_FRAME_AGE_S = 315_360_000.0
FULL_SCALE_DB = 100.0


class FaultRunError(AssertionError):
    """A run could not finish (a process would not start, progress stopped); names why."""


@dataclass(frozen=True)
class Fault:
    """SIGKILL ``kind`` once the sensor has measured ``at_s`` seconds (plus ``jitter_s`` of
    wall time), keep it dead for ``down_s`` and start it again."""

    kind: str
    at_s: int
    jitter_s: float
    down_s: float


def fault_schedule(counts: Mapping[str, int], total_s: int, seed: int,
                   down_s: tuple[float, float] = (0.2, 2.0)) -> list[Fault]:
    """The faults of ``counts`` (kind -> number) in a seeded random order at seeded random
    seconds between 5 % and 70 % of the recording, one at a time."""
    unknown = set(counts) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown fault kind(s) {sorted(unknown)}; known: {', '.join(KINDS)}")
    rng = random.Random(seed)
    kinds = [kind for kind in KINDS for _ in range(counts.get(kind, 0))]
    rng.shuffle(kinds)
    low, high = int(total_s * 0.05), int(total_s * 0.7)
    if high - low < len(kinds):
        raise ValueError(f"{len(kinds)} faults do not fit in {total_s} s of audio")
    moments = sorted(rng.sample(range(low, high), len(kinds)))
    return [Fault(kind, at, round(rng.uniform(0.0, 0.5), 3), round(rng.uniform(*down_s), 3))
            for kind, at in zip(kinds, moments, strict=True)]


class FrameTap:
    """Keeps every frame published on the device's topic, by sequence number (QoS 1,
    persistent session, so broker restarts and redeliveries are seen as the analyzer sees them).
    A sequence number seen with two different payloads is recorded in ``conflicts``."""

    def __init__(self, port: int) -> None:
        self.frames: dict[int, bytes] = {}
        self.conflicts: list[int] = []
        self.subscribed = False
        self.client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
                                  client_id="fault-tap", protocol=mqtt.MQTTv5)
        self.client.reconnect_delay_set(min_delay=1, max_delay=1)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = 3600
        self.client.connect_async("127.0.0.1", port, keepalive=5, clean_start=False,
                                  properties=properties)
        self.client.loop_start()

    def _on_connect(self, client: mqtt.Client, *args: Any) -> None:
        client.subscribe(frame_topic(DEVICE), qos=1)

    def _on_subscribe(self, *args: Any) -> None:
        self.subscribed = True

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        payload = bytes(message.payload)
        try:
            seq = decode_frame(payload).seq
        except WireError:
            return  # the analyzer counts those; the comparison shows what they cost
        if self.frames.setdefault(seq, payload) != payload:
            self.conflicts.append(seq)

    def close(self) -> None:
        """Disconnect."""
        self.client.disconnect()
        self.client.loop_stop()


@dataclass
class RunResult:
    """What one run left in InfluxDB and the sensor's outbox."""

    frames: list[tuple[int, int, float | None]]  # (time ns, seq, max_dog_score) by time
    frame_count: int  # level points, duplicates included (a duplicate seq shows twice)
    events: list[dict[str, Any]]
    windows: list[dict[str, Any]]
    verified_windows: int
    recompute_problems: list[str]
    integrity: list[str]  # PRAGMA integrity_check after each sensor kill and at the end
    sensor_starts: list[int]  # the second each sensor process started at
    published: dict[int, bytes] = field(default_factory=dict)  # the tap's frames by seq
    conflicts: list[int] = field(default_factory=list)  # seqs published with two payloads
    faults_done: list[Fault] = field(default_factory=list)
    wall_s: float = 0.0


def outbox_next_seq(path: Path) -> int | None:
    """The sensor outbox's next sequence number (= seconds measured), None if unreadable."""
    if not path.exists():
        return None
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0) as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'next_seq'").fetchone()
    except sqlite3.Error:
        return None
    return int(row[0]) if row else 0


def integrity_check(path: Path) -> str:
    """SQLite's ``PRAGMA integrity_check`` of the outbox: 'ok' or what is broken."""
    with sqlite3.connect(str(path), timeout=5.0) as db:
        rows = db.execute("PRAGMA integrity_check").fetchall()
    return "; ".join(str(row[0]) for row in rows)


def _kill(process: subprocess.Popen[Any] | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)


class FaultRun:
    """One run of the recording ``audio`` (``total_s`` whole seconds) under ``workdir``."""

    def __init__(self, workdir: Path, audio: Path, total_s: int, pace: float,
                 rules: Mapping[str, float] | None = None, timeout_s: float = 900.0) -> None:
        self.workdir = workdir
        self.audio = audio
        self.total_s = total_s
        self.pace = pace
        self.rules = dict(rules or {})
        self.deadline = time.monotonic() + timeout_s
        workdir.mkdir(parents=True, exist_ok=True)
        self.broker = Mosquitto(workdir / "mosquitto")
        self.influx = InfluxDB(workdir / "influxdb")
        self.outbox = workdir / "outbox.sqlite"
        self.analyzer: subprocess.Popen[bytes] | None = None
        self.sensor: subprocess.Popen[bytes] | None = None
        self.analyzer_log = workdir / "analyzer.log"
        self.sensor_log = workdir / "sensor.log"
        self.sensor_starts: list[int] = []
        self.integrity: list[str] = []
        self._write_configs()

    # --- configuration and processes -------------------------------------------------------
    def _write_configs(self) -> None:
        rules = "".join(f"{key} = {value}\n" for key, value in self.rules.items())
        (self.workdir / "analyzer.toml").write_text(
            f'client_id = "fault-analyzer"\nstats_interval_s = 5.0\n'
            f"max_frame_age_s = {MAX_FRAME_AGE_S}\n"
            f'journal_path = "{self.workdir / "analyzer-journal.sqlite"}"\n'
            f"[mqtt]\nport = {self.broker.port}\nkeepalive_s = 5\nreconnect_max_s = 1\n"
            f'[influx]\nurl = "{self.influx.url}"\nretry_max_s = 0.5\ntimeout_s = 5.0\n'
            f"[rules]\n{rules}"
        )
        (self.workdir / "sensor.toml").write_text(
            f'device_id = "{DEVICE}"\nheartbeat_interval_s = 1.0\n'
            f"[mqtt]\nport = {self.broker.port}\nkeepalive_s = 5\nreconnect_max_s = 1\n"
            f"[calibration]\nfull_scale_db = {FULL_SCALE_DB}\n"
            f'[outbox]\npath = "{self.outbox}"\n'
        )

    def _start_analyzer(self) -> None:
        with open(self.analyzer_log, "ab") as log_file:
            self.analyzer = subprocess.Popen(
                [BIN / "barkwatch", "analyzer", "run", "--config",
                 self.workdir / "analyzer.toml"],
                stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )

    def _start_sensor(self, first_s: int, seconds: int | None = None) -> None:
        """The sensor on the recording from second ``first_s`` (``seconds`` long, or to the
        end), capture time stamped from that second on."""
        piece = write_from_second(self.audio, self.workdir / f"from-{first_s}.wav", first_s,
                                  seconds)
        start = datetime.fromtimestamp((START_NS + first_s * NS) // NS, tz=UTC).isoformat()
        self.sensor_starts.append(first_s)
        with open(self.sensor_log, "ab") as log_file:
            self.sensor = subprocess.Popen(
                [BIN / "barkwatch-sensor", "run", "--config", self.workdir / "sensor.toml",
                 "--input", piece, "--pace", str(self.pace), "--start-time", start],
                stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )

    def _wait(self, condition: Callable[[], bool], what: str, timeout_s: float = 300.0) -> None:
        deadline = min(self.deadline, time.monotonic() + timeout_s)
        while not condition():
            if time.monotonic() > deadline:
                raise FaultRunError(f"gave up waiting for {what}{self._missing()}\n"
                                    f"{self.tails()}")
            time.sleep(0.05)

    def tails(self) -> str:
        """The last lines of the analyzer's and the sensor's logs."""
        parts = []
        for path in (self.analyzer_log, self.sensor_log):
            lines = path.read_text(errors="replace").splitlines() if path.exists() else []
            parts.append(f"--- {path.name}:\n" + "\n".join(lines[-15:]))
        return "\n".join(parts)

    def _missing(self) -> str:
        try:
            levels = self._select(f"SELECT seq, max_dog_score FROM level WHERE device = "
                                  f"'{DEVICE}'")
        except Exception as exc:  # the report must not hide the first failure
            return f" (stored frames unreadable: {exc})"
        stored = {int(r["seq"]) for r in levels}
        unscored = sorted(int(r["seq"]) for r in levels if r["max_dog_score"] is None)
        missing = sorted(set(range(self.total_s)) - stored)
        return (f"; {self.total_s - len(missing)} frames stored, missing seq {_brief(missing)},"
                f" unscored seq {_brief(unscored)}")

    def progress_s(self) -> int:
        """Seconds the sensor has measured (its outbox's next sequence number)."""
        return outbox_next_seq(self.outbox) or 0

    # --- faults ------------------------------------------------------------------------------
    def _log_count(self, path: Path, text: str) -> int:
        return path.read_text(errors="replace").count(text) if path.exists() else 0

    def inject(self, fault: Fault) -> None:
        """Kill ``fault.kind`` hard, keep it down for ``fault.down_s``, start it again and
        wait until it is back (faults come one at a time)."""
        if self.progress_s() >= self.total_s:
            raise FaultRunError(f"the replay ended before the {fault.kind} fault due at "
                                f"{fault.at_s} s (recovering from the faults before it took "
                                "longer): replay at a slower pace")
        log.info("SIGKILL %s at %d s measured", fault.kind, self.progress_s())
        if fault.kind == "analyzer":
            _kill(self.analyzer)
            time.sleep(fault.down_s)
            connects = self._log_count(self.analyzer_log, "analyzer connected")
            self._start_analyzer()
            self._wait(lambda: self._log_count(self.analyzer_log, "analyzer connected")
                       > connects, "the restarted analyzer to connect", 120)
        elif fault.kind in ("broker", "influxdb"):
            service: Mosquitto | InfluxDB = self.broker if fault.kind == "broker" else self.influx
            _kill(service.process)
            service.process = None
            time.sleep(fault.down_s)
            service.start()
        elif fault.kind == "sensor":
            _kill(self.sensor)
            self.integrity.append(integrity_check(self.outbox))
            time.sleep(fault.down_s)
            resume_s = self.progress_s()
            if resume_s < self.total_s:
                connects = self._log_count(self.sensor_log, "connected to broker")
                self._start_sensor(resume_s)
                self._wait(lambda: self._log_count(self.sensor_log, "connected to broker")
                           > connects, "the restarted sensor to connect", 120)

    # --- the run -----------------------------------------------------------------------------
    def run(self, faults: list[Fault] | None = None,
            frames: Mapping[int, bytes] | None = None) -> RunResult:
        """Replay the recording through the sensor with ``faults`` injected, or (``frames``:
        a faulted run's published frames) publish those frames in order, nothing killed.
        Returns what was stored."""
        started = time.monotonic()
        done: list[Fault] = []
        tap: FrameTap | None = None
        self.broker.start()
        self.influx.start()
        try:
            self._start_analyzer()
            # Its session must exist before the sensor publishes, or frames reach no one.
            self._wait(lambda: "analyzer connected" in self.analyzer_log.read_text(),
                       "the analyzer to connect", 60)
            time.sleep(1.0)
            if frames is None:
                tap = FrameTap(self.broker.port)
                self._wait(lambda: tap is not None and tap.subscribed, "the tap's session", 30)
                self._save_broker()
                self._replay_with_faults(faults or [], done)
            else:
                self._publish(frames)
            self._wait(lambda: self._scored() >= self.total_s,
                       f"{self.total_s} scored frames in InfluxDB", 120)
            self.analyzer.send_signal(signal.SIGTERM) if self.analyzer else None
            if self.analyzer is not None and self.analyzer.wait(timeout=60) != 0:
                raise FaultRunError(f"the analyzer exited with {self.analyzer.returncode}\n"
                                    f"{self.tails()}")
            result = self._result()
            if tap is not None:
                result.published, result.conflicts = dict(tap.frames), list(tap.conflicts)
        finally:
            if tap is not None:
                tap.close()
            _kill(self.sensor)
            _kill(self.analyzer)
            self.broker.stop()
            self.influx.stop()
        result.faults_done = done
        result.wall_s = time.monotonic() - started
        return result

    def _replay_with_faults(self, faults: list[Fault], done: list[Fault]) -> None:
        self._start_sensor(0)
        for fault in faults:
            self._wait(functools.partial(self._reached, fault.at_s),
                       f"the sensor to reach {fault.at_s} s")
            time.sleep(fault.jitter_s)
            self.inject(fault)
            done.append(fault)
        self._wait(lambda: self.sensor is not None and self.sensor.poll() is not None,
                   "the sensor to finish and drain its outbox")
        if self.sensor is not None and self.sensor.returncode != 0:
            raise FaultRunError(f"the sensor exited with {self.sensor.returncode}\n"
                                f"{self.tails()}")
        self.integrity.append(integrity_check(self.outbox))

    def _reached(self, at_s: int) -> bool:
        """The sensor has measured ``at_s`` seconds, or has ended."""
        return self.progress_s() >= at_s or (self.sensor is not None
                                            and self.sensor.poll() is not None)

    def _publish(self, frames: Mapping[int, bytes]) -> None:
        """Publish ``frames`` in sequence order at QoS 1, as the sensor did."""
        client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
                             client_id="reference-publisher", protocol=mqtt.MQTTv5)
        client.connect("127.0.0.1", self.broker.port)
        client.loop_start()
        try:
            infos = [client.publish(frame_topic(DEVICE), frames[seq], qos=1)
                     for seq in sorted(frames)]
            for info in infos:
                info.wait_for_publish(timeout=60)
        finally:
            client.disconnect()
            client.loop_stop()

    def _save_broker(self) -> None:
        """Have Mosquitto write its persistence file now (SIGUSR1), as its autosave has long
        done in a deployment: the analyzer's session then survives a broker kill early on."""
        saves = self._log_count(self.broker.log_path, "Saving in-memory database")
        assert self.broker.process is not None
        self.broker.process.send_signal(signal.SIGUSR1)
        self._wait(lambda: self._log_count(self.broker.log_path, "Saving in-memory database")
                   > saves, "the broker to save its sessions", 30)

    def _client(self) -> InfluxClient:
        return InfluxClient(InfluxSettings(url=self.influx.url))

    def _select(self, query: str) -> list[dict[str, Any]]:
        series = self._client().query(query)
        return [dict(zip(s["columns"], v, strict=True)) for s in series for v in s["values"]]

    def _scored(self) -> int:
        try:
            rows = self._select(f"SELECT COUNT(max_dog_score) FROM level "
                                f"WHERE device = '{DEVICE}'")
        except Exception:  # InfluxDB restarting: not yet
            return 0
        return int(rows[0]["count"]) if rows else 0

    def _result(self) -> RunResult:
        where = f"WHERE device = '{DEVICE}'"
        levels = self._select(f"SELECT seq, max_dog_score FROM level {where}")
        report = recompute(self._client(), DEVICE, START_NS, START_NS + self.total_s * NS)
        return RunResult(
            frames=[(int(r["time"]), int(r["seq"]), r["max_dog_score"]) for r in levels],
            frame_count=len(levels),
            events=self._select(f"SELECT * FROM dog_event {where}"),
            windows=self._select(f"SELECT * FROM evidence_window {where}"),
            verified_windows=report.verified,
            recompute_problems=[f"{m.kind} {m.rule} at {m.start_ns}: {m.detail}"
                                for m in report.mismatches],
            integrity=list(self.integrity),
            sensor_starts=list(self.sensor_starts),
        )


def differences(faulted: RunResult, reference: RunResult, total_s: int) -> list[str]:
    """Every way the faulted run's stored outcome departs from the reference's (empty: none)."""
    problems: list[str] = []
    seqs = [seq for _, seq, _ in faulted.frames]
    missing = sorted(set(range(total_s)) - set(seqs))
    if missing:
        problems.append(f"{len(missing)} frame(s) never stored, seq {_brief(missing)}")
    twice = sorted({s for s in seqs if seqs.count(s) > 1})
    if twice:
        problems.append(f"{len(twice)} frame(s) stored more than once, seq {_brief(twice)}")
    wrong_time = [seq for t, seq, _ in faulted.frames if t != START_NS + seq * NS]
    if wrong_time:
        problems.append(f"frames stored at another capture time than their seq's: "
                        f"{_brief(wrong_time)}")
    scores = {seq: score for _, seq, score in faulted.frames}
    changed = [seq for _, seq, score in reference.frames if scores.get(seq, score) != score]
    if changed:
        problems.append(f"{len(changed)} frame score(s) differ from the reference's, seq "
                        f"{_brief(changed)}")
    for name, ours, theirs in (("events", faulted.events, reference.events),
                               ("evidence windows", faulted.windows, reference.windows)):
        if ours != theirs:
            problems.append(f"{name} differ: {len(ours)} stored, {len(theirs)} in the "
                            f"reference; first difference: {_first_difference(ours, theirs)}")
    problems += [f"window does not verify: {p}" for p in faulted.recompute_problems]
    problems += [f"outbox integrity check: {r}" for r in faulted.integrity if r != "ok"]
    if faulted.conflicts:
        problems.append(f"seq published with two different payloads: {_brief(faulted.conflicts)}")
    return problems


def _brief(values: list[int]) -> str:
    shown = ", ".join(map(str, values[:10]))
    return shown + (f" ... ({len(values)} in all)" if len(values) > 10 else "")


def _first_difference(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> str:
    for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            return f"#{index} at {a.get('time')}: " + ", ".join(
                f"{k} {a.get(k)!r} != {b.get(k)!r}" for k in keys[:4])
    return f"#{min(len(ours), len(theirs))}: one run has more"
