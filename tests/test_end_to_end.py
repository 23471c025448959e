"""Sensor -> Mosquitto -> analyzer -> InfluxDB with real services, outages included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from analyzer.config import AnalyzerConfig
from analyzer.deploy.services import InfluxDB, Mosquitto, Services
from analyzer.ingest.service import Analyzer
from analyzer.store.influx import InfluxClient, InfluxSettings, band_field
from sensor.capture import FileSource
from sensor.config import CalibrationSettings, MqttSettings, OutboxSettings, SensorConfig
from sensor.frames import frames_from_samples
from sensor.node import run_node
from sensor.wire import MAX_PAYLOAD_BYTES, encode_frame, frame_topic
from tests.conftest import publish_through_analyzer, sine, wait_until, write_excerpt

BIN = Path(sys.executable).parent
FULL_SCALE_DB = 100.0
START_ISO = "2026-06-01T22:00:00+00:00"
START_NS = 1_780_351_200_000_000_000  # START_ISO in ns
# Replays here are stamped START_ISO, which may be long past: let the analyzer accept them.
MAX_FRAME_AGE_S = 315_360_000.0


def analyzer_config(services: Services) -> AnalyzerConfig:
    return AnalyzerConfig(
        stats_interval_s=1.0,
        max_frame_age_s=MAX_FRAME_AGE_S,
        mqtt=MqttSettings(port=services.broker.port, keepalive_s=5, reconnect_max_s=1),
        influx=InfluxSettings(url=services.influx.url, retry_max_s=0.5, timeout_s=2.0),
    )


def sensor_config(services: Services, outbox: Path, device: str) -> SensorConfig:
    return SensorConfig(
        device_id=device,
        heartbeat_interval_s=1.0,
        mqtt=MqttSettings(port=services.broker.port, keepalive_s=5, reconnect_max_s=1),
        calibration=CalibrationSettings(full_scale_db=FULL_SCALE_DB, date="2026-05-30"),
        outbox=OutboxSettings(path=str(outbox)),
    )


def stored_seqs(services: Services, device: str) -> list[int]:
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    series = client.query(f"SELECT seq FROM level WHERE device = '{device}'")
    return sorted(row[1] for row in series[0]["values"]) if series else []


def replay_in_thread(config: SensorConfig, path: Path, speed: float | None) -> threading.Thread:
    source = FileSource(path, speed=speed)
    thread = threading.Thread(
        target=run_node,
        args=(config, source, START_NS, threading.Event()),
        kwargs={"exit_when_drained": True},
        daemon=True,
    )
    thread.start()
    return thread


def test_replay_through_the_real_commands_stores_one_level_point_per_second_equal_to_offline(
    services: Services, excerpt_20s: Path, tmp_path: Path
) -> None:
    (tmp_path / "analyzer.toml").write_text(
        f'stats_interval_s = 1.0\nmax_frame_age_s = {MAX_FRAME_AGE_S}\n'
        f'[mqtt]\nport = {services.broker.port}\n'
        f'[influx]\nurl = "{services.influx.url}"\n'
    )
    (tmp_path / "sensor.toml").write_text(
        f'device_id = "replay-01"\n[mqtt]\nport = {services.broker.port}\n'
        f"[calibration]\nfull_scale_db = {FULL_SCALE_DB}\n"
        f'[outbox]\npath = "{tmp_path / "outbox.sqlite"}"\n'
    )
    log_path = tmp_path / "analyzer.log"
    with open(log_path, "w") as log_file:
        analyzer = subprocess.Popen(
            [BIN / "barkwatch", "analyzer", "run", "--config", tmp_path / "analyzer.toml"],
            stderr=log_file, text=True,
        )
    try:
        # Its session must exist before the (fast) replay publishes, or those frames have
        # nobody to be queued for.
        wait_until(lambda: "analyzer connected" in log_path.read_text(), what="the analyzer")
        sensor = subprocess.run(
            [BIN / "barkwatch-sensor", "run", "--config", tmp_path / "sensor.toml",
             "--input", excerpt_20s, "--pace", "fast", "--start-time", START_ISO],
            capture_output=True, text=True, timeout=300,
        )
        assert sensor.returncode == 0, sensor.stderr
        wait_until(lambda: len(stored_seqs(services, "replay-01")) >= 20, what="20 level points")
    finally:
        analyzer.send_signal(signal.SIGTERM)
        analyzer.wait(timeout=60)
    assert analyzer.returncode == 0, log_path.read_text()

    offline = subprocess.run(
        [BIN / "barkwatch", "analyze", excerpt_20s, "--include-frames",
         "--full-scale-db", str(FULL_SCALE_DB)],
        capture_output=True, text=True, check=True, timeout=300,
    )
    document = json.loads(offline.stdout)
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    series = client.query("SELECT * FROM level WHERE device = 'replay-01'")[0]
    rows = [dict(zip(series["columns"], values, strict=True)) for values in series["values"]]
    assert [row["seq"] for row in rows] == list(range(20))
    assert [row["time"] for row in rows] == [START_NS + i * 1_000_000_000 for i in range(20)]
    assert len(document["frames"]) == 20
    first_band = round(10 * np.log10(document["band_centres_hz"][0] / 1000))
    for row, frame in zip(rows, document["frames"], strict=True):
        for key in ("laeq_db", "lceq_db", "lzeq_db", "lafmax_db"):
            if frame[key] is None:  # wire v4: a second without dog activity has no LCeq, LZeq
                assert row[key] is None and key in ("lceq_db", "lzeq_db"), key
                continue
            assert abs(row[key] - frame[key]) <= 0.006, key
        assert abs(row["max_dog_score"] - frame["dog_score"]) <= 1e-4
        for offset, level in enumerate(frame["bands_db"]):
            assert abs(row[band_field(first_band + offset)] - level) <= 0.006


def test_malformed_oversized_and_mismatched_frames_are_counted_and_dropped_valid_ones_stored(
    services: Services,
) -> None:
    frames = list(frames_from_samples(sine(1000.0, 0.1, 10.0, 48000), 48000, FULL_SCALE_DB,
                                      device_id="dev-a", start_ns=START_NS))
    stranger = next(frames_from_samples(sine(1000.0, 0.1, 1.0, 48000), 48000, FULL_SCALE_DB,
                                        device_id="dev-b", start_ns=START_NS))
    payloads = [encode_frame(f) for f in frames[:5]]
    # Oversized for the analyzer, yet inside the broker's max_packet_size (which would
    # disconnect the publisher instead).
    oversized = os.urandom(MAX_PAYLOAD_BYTES + 100)
    payloads += [b"\x93not a frame", oversized, encode_frame(stranger)]
    payloads += [encode_frame(f) for f in frames[5:]]
    analyzer = publish_through_analyzer(analyzer_config(services), frame_topic("dev-a"),
                                        payloads, stored=10)
    assert analyzer.counters.malformed == 1
    assert analyzer.counters.oversize == 1
    assert analyzer.counters.device_mismatch == 1
    assert stored_seqs(services, "dev-a") == list(range(10))
    assert stored_seqs(services, "dev-b") == []


def _replay_across_an_outage(services: Services, tmp_path: Path, device: str,
                             service: Mosquitto | InfluxDB) -> Analyzer:
    """Replay 30 s at 5x real time and stop ``service`` for 3 s once 5 frames are stored."""
    recording = write_excerpt(tmp_path / "thirty.wav", 60.0, 30.0)
    analyzer = Analyzer(analyzer_config(services))
    analyzer.start()
    try:
        wait_until(analyzer.connected.is_set, what="the analyzer to connect")
        node = replay_in_thread(sensor_config(services, tmp_path / "o.sqlite", device),
                                recording, speed=5.0)
        wait_until(lambda: analyzer.counters.frames_stored >= 5, what="5 stored frames")
        service.stop()
        time.sleep(3.0)  # the outage
        service.start()
        node.join(timeout=240)
        assert not node.is_alive()
        wait_until(lambda: len(stored_seqs(services, device)) >= 30, what="30 frames")
    finally:
        analyzer.stop()
    return analyzer


def test_broker_outage_in_the_middle_of_a_replay_loses_no_frame(
    services: Services, tmp_path: Path
) -> None:
    # The sensor keeps measuring into its outbox while the broker is away.
    _replay_across_an_outage(services, tmp_path, "outage-b", services.broker)
    assert stored_seqs(services, "outage-b") == list(range(30))


def test_influxdb_outage_while_the_analyzer_runs_loses_no_frame(
    services: Services, tmp_path: Path
) -> None:
    # Frames wait unacknowledged at the broker while InfluxDB is away.
    analyzer = _replay_across_an_outage(services, tmp_path, "outage-i", services.influx)
    assert analyzer.counters.influx_retries > 0
    assert stored_seqs(services, "outage-i") == list(range(30))


def test_frames_measured_while_the_broker_is_down_survive_a_sensor_restart(
    services: Services, tmp_path: Path
) -> None:
    first = write_excerpt(tmp_path / "first.wav", 0.0, 5.0)
    second = write_excerpt(tmp_path / "second.wav", 5.0, 5.0)
    config = sensor_config(services, tmp_path / "restart.sqlite", "restart-1")
    services.broker.stop()
    run_node(config, FileSource(first), START_NS, threading.Event(), exit_when_drained=False)
    services.broker.start()
    analyzer = Analyzer(analyzer_config(services))
    analyzer.start()
    try:
        run_node(config, FileSource(second), START_NS + 5_000_000_000, threading.Event(),
                 exit_when_drained=True)
        wait_until(lambda: len(stored_seqs(services, "restart-1")) >= 10, what="10 frames")
    finally:
        analyzer.stop()
    assert stored_seqs(services, "restart-1") == list(range(10))


def test_heartbeat_and_status_reach_influxdb(services: Services, tmp_path: Path) -> None:
    recording = write_excerpt(tmp_path / "short.wav", 0.0, 3.0)
    analyzer = Analyzer(analyzer_config(services))
    analyzer.start()
    try:
        wait_until(analyzer.connected.is_set, what="the analyzer to connect")
        run_node(sensor_config(services, tmp_path / "hb.sqlite", "health-1"),
                 FileSource(recording), START_NS, threading.Event(), exit_when_drained=True)
        wait_until(lambda: analyzer.counters.heartbeats >= 1, what="a heartbeat")
        wait_until(lambda: analyzer.counters.status_changes >= 2, what="online and offline")
    finally:
        analyzer.stop()
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    health = client.query("SELECT outbox_backlog, dropped_blocks, clock_synchronised, "
                          "calibration_date FROM sensor_health WHERE device = 'health-1'")
    assert health and health[0]["values"][0][4] == "2026-05-30"
    status = client.query("SELECT online FROM sensor_status WHERE device = 'health-1'")
    assert [row[1] for row in status[0]["values"]][-1] is False
