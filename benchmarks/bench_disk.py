"""How much disk one sensor's evidence takes in InfluxDB: bytes per device-day, for sizing.

    .venv/bin/python benchmarks/bench_disk.py [--days 2] [--devices 2]

Real frames: the bundled recording (demo/example.flac, 150 s) upsampled to 48 kHz, the rate a
deployed sensor captures at, measured by the sensor's own FrameBuilder (31 third-octave
bands). Their ``level`` points (``analyzer.store.level_point``, every field the analyzer
stores), cycled with their capture times moved on, for ``--days`` days of each of
``--devices`` devices, plus the rules' progress every 10 s (``progress_point``) and the
one-minute rollups InfluxDB's continuous queries would write — a sensor's steady load. Dog
events and evidence windows are a few points a day and are left out. InfluxDB is told to
snapshot its cache and compact soon after writes stop; the data directory is measured once
its size has settled (TSM files, compressed), and the WAL beside it.
Prints JSON: bytes per device-day and what a year of one sensor and of 50 sensors needs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import soundfile
import soxr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer.deploy.services import InfluxDB  # noqa: E402
from analyzer.ordinance.rules import RuleEngine  # noqa: E402
from analyzer.store import InfluxClient, InfluxSettings, level_point, progress_point  # noqa: E402
from sensor.frames import frames_from_samples  # noqa: E402
from sensor.wire import Frame  # noqa: E402

NS = 1_000_000_000
DAY_S = 86_400
RATE = 48_000
START_NS = 1_780_272_000 * NS  # 2026-06-01T00:00:00Z


def real_frames() -> list[Frame]:
    audio, rate = soundfile.read(ROOT / "demo" / "example.flac", dtype="float64")
    upsampled = soxr.resample(audio, rate, RATE)
    return list(frames_from_samples(upsampled, RATE, 120.0, "bench"))


def du_bytes(path: Path) -> int:
    done = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=2, help="days per device (default 2)")
    parser.add_argument("--devices", type=int, default=2, help="devices (default 2)")
    args = parser.parse_args()
    if not 1 <= args.days <= 30 or not 1 <= args.devices <= 20:
        parser.error("--days must be 1-30 and --devices 1-20 (the run is bounded)")
    frames = real_frames()
    with tempfile.TemporaryDirectory(prefix="barkwatch-disk-") as scratch:
        server = InfluxDB(Path(scratch) / "influxdb")
        text = server.config_path.read_text()
        server.config_path.write_text(text.replace(
            "  query-log-enabled = false\n",
            '  query-log-enabled = false\n  cache-snapshot-write-cold-duration = "5s"\n'
            '  compact-full-write-cold-duration = "15s"\n'))
        server.start()
        try:
            client = InfluxClient(InfluxSettings(url=server.url))
            client.create_database()
            started = time.monotonic()
            points = 0
            for device in range(args.devices):
                engine = RuleEngine(f"yard-{device}")
                lines: list[str] = []
                for second in range(args.days * DAY_S):
                    frame = frames[second % len(frames)]
                    capture_ns = START_NS + second * NS
                    moved = replace(frame.retimed(capture_ns), device_id=f"yard-{device}",
                                    seq=second)
                    lines.append(level_point(moved, float(np.max(moved.dog_steps)))
                                 .to_line_protocol())
                    if second % 10 == 9:
                        engine.observe_coverage(capture_ns - 9 * NS, capture_ns + NS)
                        engine.advance(capture_ns + NS)
                        lines.append(progress_point(engine.progress(capture_ns + NS))
                                     .to_line_protocol())
                    if len(lines) >= 5000:
                        client.write_lines(lines)
                        points += len(lines)
                        lines = []
                client.write_lines(lines)
                points += len(lines)
            # The one-minute rollups, as the continuous queries write them.
            client.query('SELECT mean(*) INTO "level_1m" FROM "level" GROUP BY time(1m), *')
            written_s = time.monotonic() - started
            data, wal = Path(scratch) / "influxdb" / "data", Path(scratch) / "influxdb" / "wal"
            sizes: list[int] = []
            for _ in range(60):  # until compaction settles, at most 5 minutes
                time.sleep(5)
                sizes.append(du_bytes(data))
                if len(sizes) >= 4 and len(set(sizes[-4:])) == 1 and du_bytes(wal) < 1 << 20:
                    break
            data_bytes, wal_bytes = sizes[-1], du_bytes(wal)
        finally:
            server.stop()
    device_days = args.days * args.devices
    per_day = (data_bytes + wal_bytes) / device_days
    print(json.dumps({
        "frames_per_device_day": DAY_S, "points_written": points,
        "write_seconds": round(written_s, 1), "bands_per_frame": len(frames[0].bands_db),
        "data_bytes": data_bytes, "wal_bytes": wal_bytes, "settled": len(set(sizes[-4:])) == 1,
        "bytes_per_device_day": round(per_day),
        "mib_per_device_day": round(per_day / 2**20, 2),
        "gib_per_device_year": round(per_day * 365 / 2**30, 2),
        "gib_per_50_devices_year": round(per_day * 365 * 50 / 2**30, 1),
    }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
