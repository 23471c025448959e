"""N sensors against the clustered broker (three NATS nodes), with one and with two analyzers.

    nice -n 10 .venv/bin/python benchmarks/bench_cluster.py --sensors 200 --analyzers 1,2 \\
        --duration 60 [--warmup 20] [--partitions 8] [--json results.jsonl]

For each analyzer count, in fresh temporary state on loopback: a 3-node cluster rendered by
``analyzer.deploy.cluster`` (TLS MQTT listeners, per-device credentials from the provisioning
behind ``barkwatch device add``, partition mapping, a replicated work-queue stream), an
InfluxDB, and that many ``barkwatch analyzer run`` processes with ``[cluster]`` set, the journal
on (one per partition) and an installation record per device. N sensors (paho-mqtt, TLS, QoS 1,
MQTT 3.1.1, each its own account, spread over the three nodes) publish one frame a second for
``--warmup`` + ``--duration`` s: the load generator and frames of ``bench_fleet.py``.

Measured over the ``--duration`` window: the share of the window's frames visible in InfluxDB
2 s after the window (the cluster keeps up when it is 98 % or more), the latency from a frame's
capture end to its point being visible (probe devices, polled every 0.2 s), CPU of one core of
the analyzers, the NATS nodes and InfluxDB (from /proc), and the load average beside them.
Bcrypt cost 4 for the benchmark's accounts (provisioning 11 would take 0.2 s a device here and
each connect as long again at the node); deployments keep 11.
"""

from __future__ import annotations

# isort: off
from single_thread import ROOT  # first: one BLAS thread before numpy loads
# isort: on
import argparse  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from bench_fleet import (  # noqa: E402
    NS,
    LatencyProbe,
    _pct,
    cache_path,
    cached_payloads,
    cpu_seconds,
    emit_row,
    receive,
    start_generators,
)

PROBES = 20


def owners(influx: Any) -> set[str]:
    """Partition workers with a stats point in the last 3 s (``<analyzer>.p<k>``)."""
    series = influx.query("SELECT last(frames_stored) FROM analyzer_stats WHERE time > now() "
                          "- 3s GROUP BY analyzer")
    return {s["tags"]["analyzer"] for s in series}


def run(n: int, analyzers: int, args: argparse.Namespace, deployment: Any, root: Path,
        cache: Path) -> dict[str, Any]:
    from analyzer.deploy.local_cluster import LocalCluster
    from analyzer.deploy.services import InfluxDB
    from analyzer.store.influx import InfluxClient, InfluxSettings

    state = root / f"run-{analyzers}"
    cluster = LocalCluster(state / "cluster", deployment, nodes=3, partitions=args.partitions)
    influx_server = InfluxDB(state / "influxdb")
    cluster.start()
    influx_server.start()
    influx = InfluxClient(InfluxSettings(url=influx_server.url))
    influx.create_database()
    processes: list[subprocess.Popen[bytes]] = []
    generators: list[Any] = []
    pipes: list[Any] = []
    devices = [f"fleet-{i:04d}" for i in range(n)]
    try:
        for k in range(analyzers):
            config = state / f"analyzer-{k}.toml"
            config.write_text(
                f'client_id = "bench-{k}"\nstats_interval_s = 1.0\n'
                f'sites_dir = "{root / "sites"}"\n[influx]\nurl = "{influx_server.url}"\n'
                + cluster.analyzer_toml(state / "journals"))
            with open(state / f"analyzer-{k}.log", "wb") as log:
                processes.append(subprocess.Popen(
                    [Path(sys.executable).parent / "barkwatch", "analyzer", "run", "--config",
                     config], stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 180
        while len(owners(influx)) < args.partitions or len(
                {o.rsplit(".p", 1)[0] for o in owners(influx)}) < analyzers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"partitions not all owned: {sorted(owners(influx))}")
            time.sleep(0.5)
        start_generators(devices, lambda i: cluster.device_mqtt(devices[i], node=i % 3),
                         args.warmup + args.duration, cache, generators, pipes)
        start_s = math.ceil(time.time()) + 1.0
        window_start_ns = round((start_s + args.warmup) * NS)
        window_end_ns = window_start_ns + args.duration * NS
        probe = LatencyProbe(influx, devices[:: max(1, n // PROBES)][:PROBES],
                             round(start_s * NS) - NS)
        probe.start()
        for pipe in pipes:
            pipe.send(start_s)
        pids = {f"analyzer-{k}": p.pid for k, p in enumerate(processes)}
        pids |= {f"nats-{node.node.name}": node.process.pid  # type: ignore[union-attr]
                 for node in cluster.nodes}
        pids["influxdb"] = influx_server.process.pid  # type: ignore[union-attr]
        time.sleep(max(0.0, window_start_ns / NS - time.time()))
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        load_before = os.getloadavg()[0]
        time.sleep(max(0.0, window_end_ns / NS - time.time()))
        cpu_after = {name: cpu_seconds(pid) for name, pid in pids.items()}
        load_after = os.getloadavg()[0]
        time.sleep(2.0)
        counted = influx.query(f"SELECT count(seq) FROM level WHERE time >= {window_start_ns - NS}"
                               f" AND time < {window_end_ns - NS}")
        visible = counted[0]["values"][0][1] if counted else 0
        results = [receive(pipe, process, 120) for pipe, process in zip(pipes, generators,
                                                                          strict=True)]
        probe.stop.set()
        probe.join()
        probe.poll()
    finally:
        for process in generators:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        cluster.close()
        influx_server.stop()
    latencies = probe.latencies_s(window_start_ns, window_end_ns)
    offered = n * args.duration
    row: dict[str, Any] = {
        "sensors": n, "analyzers": analyzers, "partitions": args.partitions,
        "offered_per_s": n, "visible_share": round(visible / offered, 3),
        "stored_per_s": round(visible / args.duration, 1),
        "latency_p50_s": _pct(latencies, 50), "latency_p95_s": _pct(latencies, 95),
        "latency_samples": len(latencies),
        "published": sum(r["published"] for r in results),
        "pubacks": sum(r["pubacks"] for r in results),
        "load_average_1min": [round(load_before, 2), round(load_after, 2)],
    }
    cpu = {name: 100 * (cpu_after[name] - cpu_before[name]) / args.duration for name in pids}
    row["analyzers_cpu_pct"] = round(sum(v for k, v in cpu.items() if k.startswith("analyzer")),
                                     1)
    row["nats_cpu_pct"] = round(sum(v for k, v in cpu.items() if k.startswith("nats")), 1)
    row["influxdb_cpu_pct"] = round(cpu["influxdb"], 1)
    row["analyzer_cpu_ms_per_frame"] = (round(10 * row["analyzers_cpu_pct"]
                                              / row["stored_per_s"], 3)
                                        if row["stored_per_s"] else None)
    row["keeps_up"] = bool(row["visible_share"] >= 0.98 and row["latency_p95_s"] < 2.0)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sensors", type=int, default=200, help="sensors (at most 1000)")
    parser.add_argument("--analyzers", default="1,2", help="analyzer counts to run, in turn")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--duration", type=int, default=60, help="measured seconds")
    parser.add_argument("--warmup", type=int, default=20, help="seconds before measuring")
    parser.add_argument("--json", help="append each run's figures to this file (JSONL)")
    args = parser.parse_args()
    counts = [int(c) for c in args.analyzers.split(",")]
    if not 1 <= args.sensors <= 1000 or not all(1 <= c <= 8 for c in counts):
        parser.error("--sensors must be 1..1000 and each analyzer count 1..8")
    if not 5 <= args.duration <= 600 or not 0 <= args.warmup <= 300:
        parser.error("--duration must be 5..600 s and --warmup 0..300 s")
    from analyzer.acoustics.site import site_template
    from analyzer.deploy import cluster
    from analyzer.deploy.local_cluster import LocalCluster
    from analyzer.deploy.services import LocalDeployment

    cluster.BCRYPT_ROUNDS = 4
    cache = cache_path()
    cached_payloads()
    with tempfile.TemporaryDirectory(prefix="barkwatch-cluster-") as tmp:
        root = Path(tmp)
        deployment = LocalDeployment(root / "deployment")
        LocalCluster(root / "passwords", deployment)  # creates cluster-passwd before devices
        (root / "sites").mkdir()
        for i in range(args.sensors):
            device = f"fleet-{i:04d}"
            deployment.add_device(device)
            (root / "sites" / f"{device}.toml").write_text(
                site_template(device, source_to_sensor_m=8.0, source_to_boundary_m=12.0))
        for analyzers in counts:
            emit_row(run(args.sensors, analyzers, args, deployment, root, cache), args.json)
    return 0


if __name__ == "__main__":
    assert ROOT  # imported for its side effect (one BLAS thread)
    sys.exit(main())
