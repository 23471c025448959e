"""The ordinance rules through MQTT, the live analyzer and InfluxDB, with a restart midway."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt

from analyzer.acoustics.site import site_template
from analyzer.config import AnalyzerConfig
from analyzer.deploy.services import Services
from analyzer.detect.pipeline import DevicePipeline
from analyzer.detect.settings import DetectorSettings
from analyzer.ingest.service import Analyzer
from analyzer.offline.analysis import frames_of_file
from analyzer.store.influx import InfluxClient, InfluxSettings
from sensor.config import MqttSettings
from sensor.frames import frames_from_samples
from sensor.wire import Frame, encode_frame, frame_topic
from tests.conftest import DEMO_RECORDING, wait_until

DEVICE = "rules-1"
NS = 1_000_000_000
EPISODE_BARKS_S = list(range(0, 481, 20))  # a bark every 20 s for 8 minutes
# two barks 20 s apart (each the other's company) every 5 minutes for 75 minutes
STRETCH_BARKS_S = [t + d for t in range(1200, 5701, 300) for d in (0, 20)]
TOTAL_S = 6500  # then quiet for longer than the intermittency gap and the reorder window
RESTART_AT_S = 3000


def _bark_and_quiet_frames() -> tuple[Frame, Frame]:
    """The demo recording's most dog-like second, and one second of faint noise (25 dB)."""
    _, frames = frames_of_file(DEMO_RECORDING, 100.0)
    pipeline = DevicePipeline("pick", DetectorSettings())
    scores = [pipeline.feed(frame).max_dog_score for frame in frames]
    bark = frames[int(np.argmax(scores))]
    rng = np.random.default_rng(4)
    noise = 10 ** (-75 / 20) * rng.standard_normal(16000)
    quiet = next(frames_from_samples(noise, 16000, 100.0))
    return bark, quiet


def _stream(start_ns: int) -> list[tuple[str, bytes]]:
    bark, quiet = _bark_and_quiet_frames()
    barks = set(EPISODE_BARKS_S) | set(STRETCH_BARKS_S)
    return [
        (frame_topic(DEVICE), encode_frame(dataclasses.replace(
            (bark if t in barks else quiet).retimed(start_ns + t * NS), device_id=DEVICE,
            seq=t)))
        for t in range(TOTAL_S)
    ]


def _publish(port: int, messages: list[tuple[str, bytes]]) -> None:
    client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
    client.max_inflight_messages_set(500)
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port)
    client.loop_start()
    infos = [client.publish(topic, payload, qos=1) for topic, payload in messages]
    for info in infos:
        info.wait_for_publish(timeout=120)
    client.disconnect()
    client.loop_stop()


def _stored_frames(influx: InfluxClient) -> int:
    series = influx.query(f"SELECT count(seq) FROM level WHERE device = '{DEVICE}'")
    return int(series[0]["values"][0][1]) if series else 0


def _recompute(services: Services, start_ns: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [Path(sys.executable).parent / "barkwatch", "findings", "recompute", "--device", DEVICE,
         "--from", str(start_ns - 3600 * NS), "--to", str(start_ns + TOTAL_S * NS),
         "--influx-url", services.influx.url],
        capture_output=True, text=True, timeout=300,
    )


def test_an_8_minute_episode_and_a_75_minute_stretch_yield_exactly_those_findings(
    services: Services, tmp_path: Path
) -> None:
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / f"{DEVICE}.toml").write_text(site_template(
        DEVICE, source_to_sensor_m=5.0, source_to_boundary_m=5.0, ground="hard"))
    config = AnalyzerConfig(
        stats_interval_s=1.0,
        sites_dir=str(sites),
        drop_flood=False,  # a burst from a plain client, which sends nothing again
        mqtt=MqttSettings(port=services.broker.port, keepalive_s=5, reconnect_max_s=1),
        influx=InfluxSettings(url=services.influx.url, retry_max_s=0.5),
    )
    start_ns = time.time_ns() - (TOTAL_S + 600) * NS
    messages = _stream(start_ns)
    influx = InfluxClient(config.influx)

    first = Analyzer(config)
    first.start()
    try:
        wait_until(first.connected.is_set, what="the analyzer to connect")
        _publish(services.broker.port, messages[:RESTART_AT_S])
        wait_until(lambda: _stored_frames(influx) >= RESTART_AT_S, what="the first half")
    finally:
        first.stop()  # mid-stretch: the rules must continue from what InfluxDB holds
    second = Analyzer(config)
    second.start()
    try:
        wait_until(second.connected.is_set, what="the restarted analyzer to connect")
        _publish(services.broker.port, messages[RESTART_AT_S:])
        wait_until(lambda: _stored_frames(influx) >= TOTAL_S, what="every frame")
        wait_until(lambda: second.counters.findings_stored >= 1, what="the stretch's finding")
    finally:
        second.stop()

    series = influx.query(
        f"SELECT rule, duration_s, events_counted FROM evidence_window "
        f"WHERE device = '{DEVICE}'")
    windows = sorted((row[1], row[2], row[3]) for row in series[0]["values"]) if series else []
    assert [rule for rule, _, _ in windows] == ["continuous", "intermittent"]
    durations = {rule: duration for rule, duration, _ in windows}
    counted = {rule: events for rule, _, events in windows}
    assert counted["continuous"] >= len(EPISODE_BARKS_S)
    assert counted["intermittent"] >= len(STRETCH_BARKS_S)
    assert 480.0 < durations["continuous"] < 490.0
    assert 4520.0 < durations["intermittent"] < 4530.0  # 1200 s to the pair ending at 5721 s

    recomputed = _recompute(services, start_ns)
    assert recomputed.returncode == 0, recomputed.stdout + recomputed.stderr

    events = influx.query(
        f"SELECT laeq_db, label FROM dog_event WHERE device = '{DEVICE}' LIMIT 1")
    onset_ns, laeq_db, label = events[0]["values"][0]
    influx.write_lines([
        f"dog_event,device={DEVICE},label={label} laeq_db={laeq_db + 6.0} {onset_ns}"])
    tampered = _recompute(services, start_ns)
    assert tampered.returncode == 1, tampered.stdout + tampered.stderr
