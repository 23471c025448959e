"""How long one device's QoS 1 flood delays another device's frames (issue 32, item 6).

    .venv/bin/python benchmarks/bench_flood_delay.py [--flood 20000] [--good 20]

A real Mosquitto and InfluxDB on loopback (``analyzer.deploy.services``), one live analyzer
in this process. A separate process publishes ``--flood`` valid, distinct 16 kHz frames of
device ``flooder`` at QoS 1 as fast as the broker takes them; meanwhile a good device
publishes ``--good`` frames, one every 0.25 s. For each good frame: the time from its
publication to its ``level`` point being readable in InfluxDB. Run twice: with the
analyzer's ``confirm_stored`` off (the flood is processed in full, as before issue 32) and on
(the flooding device's frames beyond its inbox share are dropped at once, unconfirmed).
Prints one JSON line per run: delays (max, median), the flood's duration, frames dropped.
Loopback only; bounded in count and time (each run gives up after ``--limit-s``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt

from analyzer.config import AnalyzerConfig
from analyzer.deploy.services import Services
from analyzer.ingest.service import Analyzer
from analyzer.store.influx import InfluxClient, InfluxSettings
from sensor.config import MqttSettings
from sensor.frames import frames_from_samples
from sensor.wire import encode_frame, frame_topic

START_NS = 1_780_351_200_000_000_000
FLOODER = """
import sys, pickle, paho.mqtt.client as mqtt
port, path = int(sys.argv[1]), sys.argv[2]
payloads = pickle.load(open(path, "rb"))
c = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
c.max_inflight_messages_set(1000)
c.connect("127.0.0.1", port)
c.loop_start()
infos = [c.publish("barkwatch/v1/frames/flooder", p, qos=1) for p in payloads]
for i in infos:
    i.wait_for_publish(timeout=120)
c.disconnect()
c.loop_stop()
"""


def frames(device: str, count: int) -> list[bytes]:
    t = np.arange(16000) / 16000
    one = next(iter(frames_from_samples(0.1 * np.sqrt(2) * np.sin(2 * np.pi * 500 * t), 16000,
                                        100.0, device_id=device, start_ns=START_NS)))
    return [encode_frame(dataclasses.replace(one, seq=i).retimed(START_NS + i * 10**9))
            for i in range(count)]


def run(confirm_stored: bool, args: argparse.Namespace, flood_file: Path) -> dict[str, object]:
    with Services() as services:
        config = AnalyzerConfig(
            confirm_stored=confirm_stored, max_frame_age_s=315_360_000.0,
            mqtt=MqttSettings(port=services.broker.port, keepalive_s=30, reconnect_max_s=1),
            influx=InfluxSettings(url=services.influx.url, retry_max_s=0.5, timeout_s=5.0))
        analyzer = Analyzer(config)
        analyzer.start()
        while not analyzer.connected.wait(0.1):
            pass
        influx = InfluxClient(InfluxSettings(url=services.influx.url))
        good = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
        good.connect("127.0.0.1", services.broker.port)
        good.loop_start()
        published: dict[int, float] = {}
        seen: dict[int, float] = {}
        started = time.monotonic()
        flooder = subprocess.Popen([sys.executable, "-c", FLOODER, str(services.broker.port),
                                    str(flood_file)])
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                series = influx.query("SELECT seq FROM level WHERE device = 'good'")
                now = time.monotonic()
                for _, seq in series[0]["values"] if series else []:
                    seen.setdefault(int(seq), now)
                stop.wait(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            time.sleep(0.5)  # the flood under way
            for seq, payload in enumerate(frames("good", args.good)):
                published[seq] = time.monotonic()
                good.publish(frame_topic("good"), payload, qos=1)
                time.sleep(0.25)
            deadline = time.monotonic() + args.limit_s
            while len(seen) < args.good and time.monotonic() < deadline:
                time.sleep(0.1)
            flooder.wait(timeout=max(1.0, deadline - time.monotonic()))
            flood_s = time.monotonic() - started
        finally:
            stop.set()
            watcher.join(timeout=5)
            if flooder.poll() is None:
                flooder.kill()
            good.disconnect()
            good.loop_stop()
            analyzer.stop()
        delays = [seen[s] - published[s] for s in published if s in seen]
        return {"confirm_stored": confirm_stored, "flood_frames": args.flood,
                "good_frames": args.good, "good_stored": len(delays),
                "delay_max_s": round(max(delays), 2) if delays else None,
                "delay_median_s": round(statistics.median(delays), 2) if delays else None,
                "flood_published_s": round(flood_s, 1),
                "flood_frames_stored": analyzer.counters.frames_stored - len(delays),
                "flood_frames_dropped": analyzer.counters.frames_dropped_flood}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=20000)
    parser.add_argument("--good", type=int, default=20)
    parser.add_argument("--limit-s", type=float, default=180.0)
    args = parser.parse_args()
    import pickle

    with tempfile.TemporaryDirectory() as folder:
        flood_file = Path(folder) / "flood.pickle"
        flood_file.write_bytes(pickle.dumps(frames("flooder", args.flood)))
        for confirm_stored in (False, True):
            print(json.dumps(run(confirm_stored, args, flood_file)), flush=True)


if __name__ == "__main__":
    main()
