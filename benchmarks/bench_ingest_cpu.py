"""The analyzer's CPU per stored frame, with one publisher instead of N TLS sensors.

    nice -n 10 .venv/bin/python benchmarks/bench_ingest_cpu.py --devices 300 --duration 60 \\
        [--warmup 15] [--no-journal] [--py-spy PREFIX] [--analyzer-tree DIR] [--json out.jsonl]

In fresh temporary state on loopback: a Mosquitto (the deployed ``barkwatch.conf``, loopback
listener without TLS), an InfluxDB, and ``barkwatch analyzer run`` as its own process with an
installation record per device and, unless ``--no-journal``, the journal on: the production
configuration of issue 37. The frames are ``bench_fleet.py``'s (the demo recording through the
sensor's code, wire v4), re-stamped per device and second and **encoded once before the run**;
one paho client in this process publishes them at QoS 1, device i's frame k at start + k + i/N
(its capture time is stamped to end then). So the load generator costs a fraction of a core
where ``bench_fleet.py``'s N TLS clients cost most of one, and what is measured is the analyzer.

Measured over the ``--duration`` window after ``--warmup``: the analyzer process's CPU time
(user + system, all its threads, from /proc) per frame it stored (its own ``frames_stored``
counter), split by thread; p50/p95 from a frame's capture end to its point being visible in
InfluxDB (20 probe devices polled every 0.2 s); the load average at the window's start and
end. CPU per frame is what decides sensors per core (1 s / CPU per frame) and, unlike
throughput, holds up on a shared machine. Then the backlog drains (``--drain`` s at most) and
every frame is checked stored exactly once.

``--py-spy PREFIX`` records the analyzer with py-spy (installed separately: ``pip install
py-spy``) over the window into PREFIX.txt (collapsed stacks) and prints the top costs.
``--analyzer-tree DIR`` runs the analyzer from another checkout (e.g. a worktree of an older
commit) to compare before and after with the same frames and load.
"""

from __future__ import annotations

# isort: off
from single_thread import ROOT  # first: one BLAS thread before numpy loads
# isort: on
import argparse  # noqa: E402
import collections  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import msgpack  # noqa: E402
from bench_fleet import (  # noqa: E402
    NS,
    LatencyProbe,
    _pct,
    cache_path,
    cached_payloads,
    cpu_seconds,
    emit_row,
    last_stats,
    memory_mb,
    profiled_analyzer,
    restamped,
    runqueue_wait_s,
)

CLK_TCK = os.sysconf("SC_CLK_TCK")
PROBE_DEVICES = 20
PROFILED = "--profiled-analyzer"  # internal: barkwatch with its worker thread under cProfile


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of ``pid``, by "name/tid"."""
    threads: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        threads[f"{name}/{task.name}"] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return threads


def encoded_frames(templates: list[Any], devices: list[str], seconds: int, start_s: float
                   ) -> list[list[bytes]]:
    """Per second k, the wire payload of every device's frame k (capture ends at start + k +
    i/N), in publishing order."""
    from sensor.wire import encode_frame

    n = len(devices)
    return [[encode_frame(restamped(templates[(i * 7 + k) % len(templates)], device, k,
                                    round((start_s + k + i / n - 1.0) * NS)))
             for i, device in enumerate(devices)] for k in range(seconds)]


def publish(host: str, port: int, devices: list[str], frames: list[list[bytes]],
            start_s: float) -> dict[str, Any]:
    """Publish ``frames`` at QoS 1 from one client on schedule; how late it ran, pubacks."""
    import paho.mqtt.client as mqtt

    from sensor.wire import frame_topic

    client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
                         client_id="bench-ingest-publisher")
    client.max_inflight_messages_set(1000)
    acked = [0]
    lock = threading.Lock()

    def on_publish(client: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        with lock:
            acked[0] += 1

    client.on_publish = on_publish
    client.connect(host, port)
    client.loop_start()
    topics = [frame_topic(d) for d in devices]
    n = len(devices)
    lags: list[float] = []
    published = 0
    try:
        for k, second in enumerate(frames):
            for i, payload in enumerate(second):
                wait = start_s + k + i / n - time.time()
                if wait > 0:
                    time.sleep(wait)
                lags.append(max(0.0, -wait))
                client.publish(topics[i], payload, qos=1)
                published += 1
        deadline = time.monotonic() + 30
        while acked[0] < published and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        client.disconnect()
        client.loop_stop()
    lags.sort()
    return {"published": published, "pubacks": acked[0],
            "publisher_lag_p99_s": round(lags[int(0.99 * (len(lags) - 1))], 3)}


def analyzer_command(tree: Path | None, profile: str | None
                     ) -> tuple[list[str | Path], dict[str, str]]:
    """How to run ``barkwatch`` from this checkout or from ``tree``, with its worker thread
    under cProfile into ``profile`` if given."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    if profile:
        return [sys.executable, __file__, PROFILED, profile, str(tree or ROOT)], env
    if tree is None:
        return [Path(sys.executable).parent / "barkwatch"], env
    # -P: the working directory (this checkout) must not come before ``tree``
    return [sys.executable, "-P", "-c", "import sys; from analyzer.cli.main import main; "
            "sys.exit(main())"], env


def top_costs(collapsed: Path, count: int = 25) -> list[tuple[str, float]]:
    """From py-spy's collapsed stacks: the functions with the most samples anywhere on the
    stack (inclusive), as a share of all samples."""
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        n = int(samples)
        total += n
        for frame in set(stack.split(";")):
            inclusive[frame] += n
    return [(frame, n / total) for frame, n in inclusive.most_common(count)] if total else []


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from analyzer.acoustics.site import site_template
    from analyzer.deploy.services import Services
    from analyzer.store.influx import InfluxClient, InfluxSettings
    from sensor.wire import decode_frame

    n = args.devices
    devices = [f"fleet-{i:04d}" for i in range(n)]
    sites = root / "sites"
    sites.mkdir()
    for device in devices:
        (sites / f"{device}.toml").write_text(
            site_template(device, source_to_sensor_m=8.0, source_to_boundary_m=12.0))
    frames_file = Path(args.frames) if args.frames else cache_path()
    if not args.frames:
        cached_payloads()
    templates = [decode_frame(p) for p in msgpack.unpackb(frames_file.read_bytes())]
    seconds = args.warmup + args.duration
    with Services(root / "services") as services:
        influx = InfluxClient(InfluxSettings(url=services.influx.url))
        influx.create_database()
        journal = "" if args.no_journal else f'journal_path = "{root / "analyzer.journal"}"\n'
        config = root / "analyzer.toml"
        config.write_text(
            f'client_id = "bench-ingest"\nstats_interval_s = 1.0\nsites_dir = "{sites}"\n'
            f'{journal}[mqtt]\nport = {services.broker.port}\npassword_env = ""\n'
            f'[influx]\nurl = "{services.influx.url}"\n')
        command, env = analyzer_command(Path(args.analyzer_tree) if args.analyzer_tree else None,
                                        args.cprofile)
        imported = subprocess.run(  # where the analyzer's code comes from, for the record
            [sys.executable, "-P", "-c", "import analyzer; print(analyzer.__file__)"], env=env,
            capture_output=True, text=True, check=True).stdout.strip()
        log_file = root / "analyzer.log"
        with open(log_file, "wb") as log:
            analyzer = subprocess.Popen([*command, "analyzer", "run", "--config", config],
                                        stdout=log, stderr=subprocess.STDOUT, env=env)
        spy: subprocess.Popen[bytes] | None = None
        try:
            deadline = time.monotonic() + 120
            while last_stats(influx)[2] != "connected":
                if time.monotonic() > deadline or analyzer.poll() is not None:
                    raise RuntimeError(f"the analyzer did not connect:\n{log_file.read_text()}")
                time.sleep(0.2)
            encode_started = time.perf_counter()
            encoded_frames(templates, devices[:1], 20, time.time())
            per_frame_s = (time.perf_counter() - encode_started) / 20
            start_s = math.ceil(time.time() + 2.0 + 1.5 * per_frame_s * n * seconds)
            frames = encoded_frames(templates, devices, seconds, start_s)
            if time.time() > start_s - 0.5:
                raise RuntimeError("encoding the frames took longer than planned")
            window_start_s = start_s + args.warmup
            window_end_s = window_start_s + args.duration
            probe = LatencyProbe(influx, devices[:: max(1, n // PROBE_DEVICES)][:PROBE_DEVICES],
                                 round((start_s - 1) * NS))
            probe.start()
            published: dict[str, Any] = {}
            publisher = threading.Thread(target=lambda: published.update(publish(
                "127.0.0.1", services.broker.port, devices, frames, start_s)), daemon=True)
            publisher.start()
            time.sleep(max(0.0, window_start_s - time.time()))
            if args.py_spy:
                spy = subprocess.Popen(
                    [shutil.which("py-spy") or Path(sys.executable).parent / "py-spy",
                     "record", "--pid", str(analyzer.pid), "--duration", str(args.duration),
                     "--rate", "50", "--format", "raw", "--output", f"{args.py_spy}.txt",
                     "--threads", "--nonblocking"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cpu_before, threads_before = cpu_seconds(analyzer.pid), thread_cpu_s(analyzer.pid)
            waited_before = runqueue_wait_s(analyzer.pid)
            stats_before, load_before = last_stats(influx), os.getloadavg()[0]
            time.sleep(max(0.0, window_end_s - time.time()))
            cpu_after, threads_after = cpu_seconds(analyzer.pid), thread_cpu_s(analyzer.pid)
            waited_s = runqueue_wait_s(analyzer.pid) - waited_before
            stats_after, load_after = last_stats(influx), os.getloadavg()[0]
            rss_mb = memory_mb(analyzer.pid)[0]
            publisher.join(timeout=seconds + 60)
            total = n * seconds
            drain_deadline = time.monotonic() + args.drain
            while last_stats(influx)[1] < total and time.monotonic() < drain_deadline:
                time.sleep(0.5)
            probe.stop.set()
            probe.join()
            probe.poll()
            stored_total = last_stats(influx)[1]
            counts = influx.query("SELECT count(seq) FROM level GROUP BY device")
            per_device = {s["tags"]["device"]: s["values"][0][1] for s in counts}
            if spy is not None:
                spy.wait(timeout=60)
        finally:
            if spy is not None and spy.poll() is None:
                spy.kill()
            analyzer.terminate()
            try:
                analyzer.wait(timeout=60)
            except subprocess.TimeoutExpired:
                analyzer.kill()
    stored = stats_after[1] - stats_before[1]
    elapsed_s = (stats_after[0] - stats_before[0]) / NS
    cpu_s = cpu_after - cpu_before
    latencies = probe.latencies_s(round(window_start_s * NS), round(window_end_s * NS))
    threads = sorted(((name, threads_after[name] - threads_before.get(name, 0.0))
                      for name in threads_after), key=lambda t: -t[1])
    row: dict[str, Any] = {
        "devices": n, "journal": not args.no_journal, "duration_s": args.duration,
        "analyzer_code": str(Path(imported).parent.parent),
        "stored_per_s": round(stored / elapsed_s, 1) if elapsed_s > 0 else math.nan,
        "analyzer_cpu_pct": round(100 * cpu_s / args.duration, 1),
        "analyzer_cpu_ms_per_frame": round(1000 * cpu_s / stored, 3) if stored else math.nan,
        # Its threads' time runnable but without a core (schedstat): what the machine withheld
        "analyzer_runqueue_wait_pct": round(100 * waited_s / args.duration, 1),
        "threads_cpu_ms_per_frame": {name: round(1000 * s / stored, 3)
                                     for name, s in threads[:4] if stored and s > 0},
        "latency_p50_s": _pct(latencies, 50), "latency_p95_s": _pct(latencies, 95),
        "latency_samples": len(latencies),
        "load_avg_1min": [round(load_before, 2), round(load_after, 2)],
        "analyzer_rss_mb": round(rss_mb), **published, "stored_total": stored_total,
        "exactly_once": stored_total == total and len(per_device) == n
        and all(v == seconds for v in per_device.values()),
    }
    row["sensors_per_core"] = (round(1000 / row["analyzer_cpu_ms_per_frame"])
                               if stored else math.nan)
    return row


def main() -> int:
    if sys.argv[1:2] == [PROFILED]:
        return profiled_analyzer(sys.argv[2], sys.argv[4:], tree=sys.argv[3], thread_clock=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=300,
                        help="devices, each one frame a second (1..2000)")
    parser.add_argument("--duration", type=int, default=60, help="measured seconds (5..600)")
    parser.add_argument("--warmup", type=int, default=15,
                        help="seconds of load before measuring (first-frame priming)")
    parser.add_argument("--drain", type=int, default=60,
                        help="seconds at most to wait for the backlog after the load stops")
    parser.add_argument("--no-journal", action="store_true", help="run without journal_path")
    parser.add_argument("--frames", help="msgpack list of wire payloads to use as templates "
                        "(default: bench_fleet.py's cache, measured on first use)")
    parser.add_argument("--analyzer-tree", help="run the analyzer from this checkout")
    parser.add_argument("--py-spy", metavar="PREFIX",
                        help="profile the analyzer with py-spy into PREFIX.txt over the window")
    parser.add_argument("--cprofile", metavar="FILE",
                        help="profile the analyzer's worker thread (cProfile, thread CPU time) "
                        "over the whole run into FILE")
    parser.add_argument("--json", help="append the figures to this file (JSONL)")
    args = parser.parse_args()
    if not 1 <= args.devices <= 2000 or not 5 <= args.duration <= 600 \
            or not 0 <= args.warmup <= 120 or not 0 <= args.drain <= 600:
        parser.error("--devices 1..2000, --duration 5..600, --warmup 0..120, --drain 0..600")
    with tempfile.TemporaryDirectory(prefix="barkwatch-ingest-cpu-") as tmp:
        row = run(args, Path(tmp))
    emit_row(row, args.json)
    if args.py_spy and Path(f"{args.py_spy}.txt").exists():
        for frame, share in top_costs(Path(f"{args.py_spy}.txt")):
            print(f"{100 * share:5.1f} %  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
