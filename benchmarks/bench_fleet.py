"""A fleet of N sensors in real time into the secured broker, one analyzer process and InfluxDB.

    nice -n 10 .venv/bin/python benchmarks/bench_fleet.py --sensors 10,100,300,1000 \\
        --duration 60 [--warmup 15] [--max-sensors 1000] [--plain] [--json results.jsonl]

For each N, on loopback and in fresh temporary state:

1. A secured Mosquitto exactly as deployed (TLS listener for devices, the analyzer's loopback
   listener, password file, ACL), N device accounts made with the provisioning code behind
   ``barkwatch device add``, an InfluxDB, and ``barkwatch analyzer run`` as its own process with
   an installation record per device (so audibility, the rules and the evidence chain run).
2. N sensors, each its own paho client logged in with its own credentials over TLS (``--plain``:
   the loopback listener), publish one frame per second at QoS 1 for ``--warmup`` +
   ``--duration`` seconds, spread evenly over the second. The frames are the demo recording's
   (resampled to 48 kHz, as deployed), measured once by ``sensor.frames``, encoded by the wire
   encoder and cached under ~/.cache/barkwatch; each is re-stamped (device, sequence number,
   capture time = now) and encoded again by the wire encoder when it is sent.
3. Measured over the ``--duration`` window (after the warm-up): frames stored per second (the
   analyzer's own ``frames_stored`` counter, from its ``analyzer_stats`` points), the latency
   from the end of a frame's capture (when a sensor can first send it) to the moment its point
   is visible in InfluxDB (polled every 0.2 s for up to 20 probe devices; add 1 s for latency
   from the frame's first sample), CPU (of one core) and memory (RSS, peak RSS) of the
   analyzer, Mosquitto, InfluxDB and the load generator itself, from /proc, and how long the
   analyzer's threads waited, runnable, for a core (``analyzer_runqueue_wait_pct``, from
   /proc/PID/task/*/schedstat): what a shared machine withheld from it.
4. Then the backlog drains (at most ``--drain`` seconds) and every frame is checked to be
   stored exactly once (``exactly_once`` null: the backlog had not drained, ``stored_total``
   says how far it got).

The analyzer keeps up when it stores at least 98 % of the offered rate, p95 latency stays under
2 s (issue 23's goal) and no more than 2 s of frames are waiting at the end of the window.
"""

from __future__ import annotations

# isort: off
from single_thread import ROOT  # first: one BLAS thread before numpy loads
# isort: on
import argparse  # noqa: E402
import dataclasses  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import multiprocessing.connection  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import msgpack  # noqa: E402
import numpy as np  # noqa: E402

DEMO = ROOT / "demo" / "example.flac"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "barkwatch"
RATE = 48000  # deployments capture at 48 kHz
SENSORS_PER_PROCESS = 250
PROBE_DEVICES = 20
POLL_S = 0.2
NS = 1_000_000_000
CLK_TCK = os.sysconf("SC_CLK_TCK")
PROFILED = "--profiled-analyzer"  # internal: run barkwatch with the worker under cProfile


# --- frames: measured once, cached ----------------------------------------------------------
def cache_path() -> Path:
    """The cache file for the current recording, sensor code and wire schema."""
    digest = hashlib.sha256(DEMO.read_bytes())
    for source in sorted((ROOT / "sensor").glob("*.py")):  # new sensor code, new frames
        digest.update(source.read_bytes())
    from sensor.wire import SCHEMA_VERSION

    return CACHE_DIR / f"fleet-frames-v{SCHEMA_VERSION}-{digest.hexdigest()[:16]}.msgpack"


def cached_payloads() -> list[bytes]:
    """The demo recording's frames as wire payloads, measured on first use."""
    path = cache_path()
    if path.exists():
        payloads: list[bytes] = msgpack.unpackb(path.read_bytes())
        return payloads
    import soundfile
    import soxr

    from sensor.frames import frames_from_samples
    from sensor.wire import encode_frame

    print(f"measuring the demo recording's frames once (cached in {path}) ...", flush=True)
    audio, rate = soundfile.read(DEMO, dtype="float64")
    audio = soxr.resample(audio, rate, RATE)
    payloads = [encode_frame(f) for f in frames_from_samples(audio, RATE, 100.0, "template", 0)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_bytes(msgpack.packb(payloads))
    path.with_suffix(".tmp").replace(path)
    return payloads


# --- the load generator: one process per SENSORS_PER_PROCESS sensors ------------------------
@dataclasses.dataclass(frozen=True)
class Job:
    """What one generator process runs: its sensors (global index, id, broker settings)."""

    sensors: list[tuple[int, str, Any]]
    total_sensors: int
    seconds: int


def restamped(template: Any, device: str, seq: int, capture_ns: int) -> Any:
    """``template`` as frame ``seq`` of ``device`` captured at ``capture_ns``: every other
    capture time it carries (wire v2's ``patch_start_ns``) moves with it."""
    shift = capture_ns - template.capture_ns
    times = {f.name: getattr(template, f.name) + shift for f in dataclasses.fields(template)
             if f.name.endswith("_start_ns")}
    return dataclasses.replace(template, device_id=device, seq=seq, capture_ns=capture_ns,
                               **times)


def receive(pipe: multiprocessing.connection.Connection, process: Any, timeout_s: float) -> Any:
    """The next message from a generator process; RuntimeError if it died or fell silent."""
    deadline = time.monotonic() + timeout_s
    while not pipe.poll(0.5):
        if not process.is_alive():
            raise RuntimeError(f"load generator {process.name} exited ({process.exitcode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"load generator {process.name} silent for {timeout_s:.0f} s")
    return pipe.recv()


def generator(job: Job, cache: str, pipe: multiprocessing.connection.Connection) -> None:
    """Connect the job's sensors, wait for the start time, publish, report what happened."""
    from sensor.publisher import connect_async, make_client
    from sensor.wire import decode_frame, encode_frame, frame_topic

    templates = [decode_frame(p) for p in msgpack.unpackb(Path(cache).read_bytes())]
    connected = threading.Semaphore(0)
    pubacks = [0]
    lock = threading.Lock()

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if not reason.is_failure:
            connected.release()

    def on_publish(client: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        with lock:
            pubacks[0] += 1

    clients = []
    for _, device, settings in job.sensors:
        client = make_client(device, settings)
        client.on_connect = on_connect
        client.on_publish = on_publish
        connect_async(client, settings)
        client.loop_start()
        clients.append(client)
    for _ in clients:
        if not connected.acquire(timeout=300):
            pipe.send({"error": "sensors did not all connect within 300 s"})
            return
    pipe.send({"ready": True})
    start_s: float = pipe.recv()
    # Sensor i publishes at start + k + i/N: frame k's capture ends then (capture time stamped
    # now, exactly one second apart per device).
    schedule = sorted((index / job.total_sensors, n) for n, (index, _, _) in
                      enumerate(job.sensors))
    lags: list[float] = []
    published = errors = 0
    for k in range(job.seconds):
        for phase, n in schedule:
            index, device, _ = job.sensors[n]
            due = start_s + k + phase
            wait = due - time.time()
            if wait > 0:
                time.sleep(wait)
            lags.append(max(0.0, -wait))
            frame = restamped(templates[(index * 7 + k) % len(templates)], device, k,
                              round((due - 1.0) * NS))
            info = clients[n].publish(frame_topic(device), encode_frame(frame), qos=1)
            published += 1
            errors += info.rc != 0
    deadline = time.monotonic() + 30
    while pubacks[0] < published and time.monotonic() < deadline:
        time.sleep(0.05)
    for client in clients:
        client.disconnect()
        client.loop_stop()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    pipe.send({"published": published, "errors": errors, "pubacks": pubacks[0],
               "lag_p99_s": float(np.percentile(lags, 99)), "lag_max_s": max(lags),
               "cpu_s": usage.ru_utime + usage.ru_stime, "rss_peak_mb": usage.ru_maxrss / 1024})


# --- process figures from /proc ---------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its waited-for children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / CLK_TCK


def runqueue_wait_s(pid: int) -> float:
    """Seconds the threads of ``pid`` have waited, runnable, for a CPU (schedstat field 2):
    time the process wanted to run and the machine's other work had the cores."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total / NS


def memory_mb(pid: int) -> tuple[float, float]:
    """(RSS, peak RSS) of ``pid`` in MB."""
    text = Path(f"/proc/{pid}/status").read_text()
    rss = re.search(r"VmRSS:\s+(\d+)", text)
    peak = re.search(r"VmHWM:\s+(\d+)", text)
    return (int(rss.group(1)) / 1024 if rss else math.nan,
            int(peak.group(1)) / 1024 if peak else math.nan)


# --- InfluxDB: latency probes and counters ----------------------------------------------------
class LatencyProbe(threading.Thread):
    """Polls InfluxDB for the probe devices' level points; records when each became visible."""

    def __init__(self, influx: Any, devices: list[str], since_ns: int) -> None:
        super().__init__(daemon=True)
        self.influx = influx
        self.where = "|".join(re.escape(d) for d in devices)
        self.since_ns = since_ns
        self.seen: dict[tuple[str, int], tuple[int, int]] = {}  # -> (capture ns, visible ns)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(POLL_S):
            self.poll()

    def poll(self) -> None:
        asked_ns = time.time_ns()  # a point visible now was stored before this moment
        since = max(self.since_ns, asked_ns - 120 * NS)
        for series in self.influx.query(
                f"SELECT seq FROM level WHERE time >= {since} AND device =~ /^({self.where})$/ "
                "GROUP BY device"):
            device = series["tags"]["device"]
            for capture_ns, seq in series["values"]:
                self.seen.setdefault((device, seq), (capture_ns, asked_ns))

    def latencies_s(self, first_ns: int, last_ns: int) -> list[float]:
        """Frame end to visible, for frames whose capture ended in [first_ns, last_ns)."""
        return [(visible - capture - NS) / NS for capture, visible in self.seen.values()
                if first_ns <= capture + NS < last_ns]


def last_stats(influx: Any) -> tuple[int, int, str]:
    """(time ns, frames_stored, broker_state) of the analyzer's last stats point."""
    series = influx.query("SELECT frames_stored, broker_state FROM analyzer_stats "
                          "ORDER BY time DESC LIMIT 1")
    if not series:
        return 0, 0, ""
    time_ns, stored, state = series[0]["values"][0]
    return int(time_ns), int(stored or 0), str(state)


# --- one run ----------------------------------------------------------------------------------
def emit_row(row: dict[str, Any], jsonl: str | None) -> None:
    """Print one run's figures as a JSON line, and append it to ``jsonl`` when given."""
    print(json.dumps(row), flush=True)
    if jsonl:
        with open(jsonl, "a") as out:
            out.write(json.dumps(row) + "\n")


def start_generators(devices: list[str], mqtt_of: Any, seconds: float, cache: Path,
                     processes: list[Any], pipes: list[Any]) -> None:
    """The load generators for ``devices`` (SENSORS_PER_PROCESS a process, sensor i with the
    MQTT settings ``mqtt_of(i)``), started and ready (their payloads loaded); they wait for
    the start time sent down their pipe. Appends to ``processes`` and ``pipes`` as it goes, so
    the caller stops those already started when one fails."""
    context = mp.get_context("spawn")
    n = len(devices)
    for first in range(0, n, SENSORS_PER_PROCESS):
        sensors = [(i, devices[i], mqtt_of(i))
                   for i in range(first, min(n, first + SENSORS_PER_PROCESS))]
        mine, theirs = context.Pipe()
        process = context.Process(target=generator, args=(Job(sensors, n, seconds),
                                                          str(cache), theirs))
        process.start()
        processes.append(process)
        pipes.append(mine)
    for pipe, process in zip(pipes, processes, strict=True):
        answer = receive(pipe, process, 600)
        if "error" in answer:
            raise RuntimeError(answer["error"])


def run_fleet(n: int, args: argparse.Namespace, deployment: Any, root: Path,
              cache: Path) -> dict[str, Any]:
    from analyzer.deploy.services import InfluxDB, Mosquitto
    from analyzer.store.influx import InfluxClient, InfluxSettings

    devices = [f"fleet-{i:04d}" for i in range(n)]
    state = root / f"run-{n}"
    broker = Mosquitto(state / "mosquitto", security=deployment.files)
    influx_server = InfluxDB(state / "influxdb")
    broker.start()
    influx_server.start()
    influx = InfluxClient(InfluxSettings(url=influx_server.url))
    influx.create_database()
    mqtt = deployment.analyzer_mqtt(broker)
    (state / "analyzer.toml").write_text(
        f'client_id = "bench-fleet"\nstats_interval_s = 1.0\nsites_dir = "{root / "sites"}"\n'
        f'[mqtt]\nport = {mqtt.port}\nusername = "{mqtt.username}"\npassword_env = ""\n'
        f'password_file = "{mqtt.password_file}"\n[influx]\nurl = "{influx_server.url}"\n')
    command: list[str | Path] = [Path(sys.executable).parent / "barkwatch"]
    if args.profile:  # the same command with its worker thread under cProfile
        command = [sys.executable, __file__, PROFILED, f"{args.profile}-{n}.prof"]
    with open(state / "analyzer.log", "wb") as log:
        analyzer = subprocess.Popen(
            [*command, "analyzer", "run", "--config", state / "analyzer.toml"], stdout=log,
            stderr=subprocess.STDOUT)
    processes: list[Any] = []
    pipes: list[multiprocessing.connection.Connection] = []
    try:
        deadline = time.monotonic() + 120
        while last_stats(influx)[2] != "connected":
            if time.monotonic() > deadline or analyzer.poll() is not None:
                raise RuntimeError(f"the analyzer did not connect; see {state}/analyzer.log")
            time.sleep(0.2)

        def sensor_mqtt(i: int) -> Any:
            mqtt = deployment.device_mqtt(devices[i], broker)
            return dataclasses.replace(mqtt, port=broker.port, tls_ca="") if args.plain else mqtt

        start_generators(devices, sensor_mqtt, args.warmup + args.duration, cache, processes,
                         pipes)
        start_s = math.ceil(time.time()) + 1.0
        window_start_ns = round((start_s + args.warmup) * NS)
        window_end_ns = window_start_ns + args.duration * NS
        probes = devices[:: max(1, n // PROBE_DEVICES)][:PROBE_DEVICES]
        probe = LatencyProbe(influx, probes, round(start_s * NS) - NS)
        probe.start()
        for pipe in pipes:
            pipe.send(start_s)
        pids = {"analyzer": analyzer.pid, "mosquitto": broker.process.pid,  # type: ignore[union-attr]
                "influxdb": influx_server.process.pid}  # type: ignore[union-attr]
        time.sleep(max(0.0, window_start_ns / NS - time.time()))
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        waited_before = runqueue_wait_s(analyzer.pid)
        stats_before = last_stats(influx)
        time.sleep(max(0.0, window_end_ns / NS - time.time()))
        cpu_after = {name: cpu_seconds(pid) for name, pid in pids.items()}
        waited_after = runqueue_wait_s(analyzer.pid)
        stats_after = last_stats(influx)
        memory = {name: memory_mb(pid) for name, pid in pids.items()}
        waiting = n * (args.warmup + args.duration) - stats_after[1]
        results = [receive(pipe, process, 120)
                   for pipe, process in zip(pipes, processes, strict=True)]
        published = sum(r["published"] for r in results)
        drain_deadline = time.monotonic() + args.drain
        while last_stats(influx)[1] < published and time.monotonic() < drain_deadline:
            time.sleep(0.5)
        probe.stop.set()
        probe.join()
        probe.poll()
        stored_total = last_stats(influx)[1]
        counts = influx.query("SELECT count(seq) FROM level GROUP BY device")
        per_device = {s["tags"]["device"]: s["values"][0][1] for s in counts}
    finally:
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
        analyzer.terminate()
        try:
            analyzer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            analyzer.kill()
        broker.stop()
        influx_server.stop()
    elapsed_s = (stats_after[0] - stats_before[0]) / NS
    stored_per_s = (stats_after[1] - stats_before[1]) / elapsed_s if elapsed_s > 0 else math.nan
    latencies = probe.latencies_s(window_start_ns, window_end_ns)
    wall_s = args.duration
    row: dict[str, Any] = {
        "sensors": n, "transport": "mqtt" if args.plain else "mqtts", "wire_bytes":
        len(msgpack.unpackb(cache.read_bytes())[0]), "offered_per_s": n,
        "stored_per_s": round(stored_per_s, 1),
        "latency_p50_s": _pct(latencies, 50), "latency_p95_s": _pct(latencies, 95),
        "latency_p99_s": _pct(latencies, 99), "latency_samples": len(latencies),
        "waiting_at_end": waiting,
        "published": published, "publish_errors": sum(r["errors"] for r in results),
        "pubacks": sum(r["pubacks"] for r in results), "stored_total": stored_total,
        # Judged once the backlog drained: every device's every frame stored, once.
        "exactly_once": None if stored_total < published else (
            stored_total == published and len(per_device) == n
            and all(v == args.warmup + args.duration for v in per_device.values())),
        "generator_lag_p99_s": round(max(r["lag_p99_s"] for r in results), 3),
        "generator_cpu_pct": round(100 * sum(r["cpu_s"] for r in results)
                                   / (args.warmup + args.duration), 1),
    }
    for name in pids:
        row[f"{name}_cpu_pct"] = round(100 * (cpu_after[name] - cpu_before[name]) / wall_s, 1)
        row[f"{name}_rss_mb"], row[f"{name}_peak_rss_mb"] = (round(v) for v in memory[name])
    # Summed over its threads: 100 % = one thread kept waiting for a core the whole window.
    row["analyzer_runqueue_wait_pct"] = round(100 * (waited_after - waited_before) / wall_s, 1)
    row["analyzer_cpu_ms_per_sensor_s"] = round(10 * row["analyzer_cpu_pct"] / n, 3)
    # Per frame stored: the cost that decides how many sensors a core carries, also when the
    # analyzer falls behind (then it stores fewer than N a second).
    row["analyzer_cpu_ms_per_frame"] = round(10 * row["analyzer_cpu_pct"] / stored_per_s, 3)
    row["keeps_up"] = bool(stored_per_s >= 0.98 * n and row["latency_p95_s"] < 2.0
                           and waiting <= 2 * n)
    return row


def profiled_analyzer(profile: str, argv: list[str], tree: str | None = None,
                      thread_clock: bool = False) -> int:
    """``barkwatch`` ``argv`` with the analyzer's worker thread (where frames are handled)
    under cProfile, written to ``profile`` when the analyzer stops (SIGTERM). ``tree``: run
    that checkout's analyzer; ``thread_clock``: time by the thread's CPU clock (waiting for a
    core or for work costs nothing)."""
    import cProfile

    if tree is not None:
        sys.path.insert(0, tree)
    from analyzer.cli.main import main as barkwatch
    from analyzer.ingest.service import Analyzer

    run = Analyzer._run

    def run_profiled(self: Analyzer) -> None:
        profiler = cProfile.Profile(time.thread_time) if thread_clock else cProfile.Profile()
        profiler.enable()
        try:
            run(self)
        finally:
            profiler.disable()
            profiler.dump_stats(profile)

    Analyzer._run = run_profiled  # type: ignore[method-assign]
    return barkwatch(argv)


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3) if values else math.nan


def main() -> int:
    if sys.argv[1:2] == [PROFILED]:
        return profiled_analyzer(sys.argv[2], sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sensors", default="10,100,300,1000",
                        help="comma-separated fleet sizes to run, one after another")
    parser.add_argument("--duration", type=int, default=60,
                        help="measured seconds per fleet size (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=15,
                        help="seconds of load before measuring (connects, first-frame priming)")
    parser.add_argument("--drain", type=int, default=60,
                        help="seconds at most to wait for the backlog after the load stops")
    parser.add_argument("--max-sensors", type=int, default=1000,
                        help="refuse fleet sizes above this (each sensor is a TLS client)")
    parser.add_argument("--plain", action="store_true",
                        help="sensors use the loopback listener without TLS")
    parser.add_argument("--profile", metavar="PREFIX",
                        help="profile the analyzer's worker thread (cProfile) into "
                        "PREFIX-N.prof for each fleet size N")
    parser.add_argument("--json", help="append each fleet size's figures to this file (JSONL)")
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sensors.split(",")]
    except ValueError:
        parser.error(f"--sensors {args.sensors!r}: expected numbers separated by commas")
    if any(not 1 <= s <= args.max_sensors for s in sizes):
        parser.error(f"--sensors {args.sensors!r}: each size must be 1..{args.max_sensors} "
                     "(--max-sensors)")
    if not 5 <= args.duration <= 3600 or not 0 <= args.warmup <= 600 or args.drain < 0:
        parser.error("--duration must be 5..3600 s, --warmup 0..600 s, --drain >= 0")
    from analyzer.acoustics.site import site_template
    from analyzer.deploy.services import LocalDeployment

    cache = cache_path()
    cached_payloads()
    with tempfile.TemporaryDirectory(prefix="barkwatch-fleet-") as tmp:
        root = Path(tmp)
        deployment = LocalDeployment(root / "deployment")
        (root / "sites").mkdir()
        started = time.perf_counter()
        for i in range(max(sizes)):
            device = f"fleet-{i:04d}"
            deployment.add_device(device)
            (root / "sites" / f"{device}.toml").write_text(
                site_template(device, source_to_sensor_m=8.0, source_to_boundary_m=12.0))
        print(f"provisioned {max(sizes)} device accounts in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        for n in sizes:
            emit_row(run_fleet(n, args, deployment, root, cache), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
