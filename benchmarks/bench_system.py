"""Wire bytes per sensor-second and analyzer throughput into InfluxDB, with real services.

    .venv/bin/python benchmarks/bench_system.py [--devices 10] [--seconds 300]

1. Bytes on the wire: one sensor replays 120 s of the demo recording (resampled to 48 kHz)
   through the real sensor code to a local Mosquitto; the broker's own byte counter
   ($SYS/broker/bytes/received, everything the broker received: CONNECT, frames, heartbeats,
   status) divided by the audio seconds.
2. Analyzer throughput: DEVICES x SECONDS pre-encoded frames are published at QoS 1 as fast
   as one client can while the analyzer runs; frames per second from the first publish until
   the last frame is stored in InfluxDB (decode, de-duplicate, score, events, line protocol,
   HTTP write and MQTT acknowledgement included; every device has an installation record, so
   audibility, the rules and the evidence chain run too).
3. The analyzer's pipeline alone (decode + score + events + line protocol), no services:
   frames per second on one core, i.e. how many real-time sensors one core keeps up with.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import soundfile
import soxr

from analyzer.acoustics.site import site_template
from analyzer.config import AnalyzerConfig
from analyzer.deploy.services import Services
from analyzer.detect.pipeline import DevicePipeline
from analyzer.detect.settings import DetectorSettings
from analyzer.ingest.service import Analyzer
from analyzer.store.influx import InfluxSettings, event_point, level_point
from sensor.capture import FileSource
from sensor.config import CalibrationSettings, MqttSettings, OutboxSettings, SensorConfig
from sensor.frames import FrameBuilder
from sensor.node import run_node
from sensor.wire import decode_frame, encode_frame, frame_topic

DEMO = Path(__file__).resolve().parent.parent / "demo" / "example.flac"
START_NS = time.time_ns() - 3600 * 1_000_000_000  # recent: older frames are implausible


def demo_at_48k(path: Path, seconds: float) -> Path:
    audio, rate = soundfile.read(DEMO, dtype="float32")
    audio = soxr.resample(audio, rate, 48000)[: round(seconds * 48000)]
    soundfile.write(path, audio, 48000, subtype="FLOAT")
    return path


def sys_bytes_received(port: int) -> int:
    value: list[int] = []
    client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
    client.on_message = lambda c, u, m: value.append(int(m.payload))
    client.connect("127.0.0.1", port)
    client.subscribe("$SYS/broker/bytes/received")
    client.loop_start()
    deadline = time.monotonic() + 10
    while not value and time.monotonic() < deadline:
        time.sleep(0.05)
    client.disconnect()
    client.loop_stop()
    return value[0]


def wire_bytes(services: Services, tmp: Path) -> None:
    seconds = 120.0
    recording = demo_at_48k(tmp / "two-min.wav", seconds)
    config = SensorConfig(
        device_id="bench-wire",
        mqtt=MqttSettings(port=services.broker.port),
        calibration=CalibrationSettings(full_scale_db=100.0),
        outbox=OutboxSettings(path=str(tmp / "wire.sqlite")),
    )
    before = sys_bytes_received(services.broker.port)
    run_node(config, FileSource(recording), START_NS, threading.Event(), exit_when_drained=True)
    time.sleep(2.5)  # $SYS is refreshed every second
    after = sys_bytes_received(services.broker.port)
    print(f"wire: {(after - before) / seconds:.0f} bytes per second of audio per sensor "
          f"({(after - before) * 8 / seconds / 1000:.1f} kbit/s; 48 kHz capture, "
          f"{seconds:.0f} s replayed; broker byte counter)", flush=True)


def encoded_frames(devices: int, seconds: int) -> list[tuple[str, bytes]]:
    audio, rate = soundfile.read(DEMO, dtype="float64")
    messages = []
    for d in range(devices):
        builder = FrameBuilder(f"bench-{d:03d}", rate, 100.0, START_NS)
        offset = d * 7 * rate  # each device a different stretch of the recording
        frames = []
        while len(frames) < seconds:
            frames += builder.push(audio[(offset % audio.size):][: rate])
            offset += rate
        messages += [(frame_topic(f.device_id), encode_frame(f)) for f in frames[:seconds]]
    # interleave devices second by second, as live traffic arrives
    messages.sort(key=lambda m: decode_frame(m[1]).seq)
    return messages


def analyzer_throughput(services: Services, messages: list[tuple[str, bytes]],
                        sites: Path) -> None:
    analyzer = Analyzer(AnalyzerConfig(
        mqtt=MqttSettings(port=services.broker.port),
        influx=InfluxSettings(url=services.influx.url),
        sites_dir=str(sites),
    ))
    analyzer.start()
    while not analyzer.connected.is_set():
        time.sleep(0.05)
    publisher = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
    publisher.max_inflight_messages_set(1000)
    publisher.max_queued_messages_set(0)
    publisher.connect("127.0.0.1", services.broker.port)
    publisher.loop_start()
    started = time.perf_counter()
    infos = [publisher.publish(topic, payload, qos=1) for topic, payload in messages]
    for info in infos:
        info.wait_for_publish(timeout=120)
    published = time.perf_counter() - started
    deadline = time.monotonic() + 600
    while analyzer.counters.frames_stored < len(messages) and time.monotonic() < deadline:
        time.sleep(0.01)
    stored = time.perf_counter() - started
    publisher.disconnect()
    publisher.loop_stop()
    analyzer.stop()
    print(f"analyzer: {analyzer.counters.frames_stored}/{len(messages)} frames stored in "
          f"{stored:.1f} s = {analyzer.counters.frames_stored / stored:.0f} frames/s into "
          f"InfluxDB (publishing alone took {published:.1f} s); "
          f"{analyzer.counters.events_stored} events", flush=True)


def pipeline_only(messages: list[tuple[str, bytes]]) -> None:
    pipelines: dict[str, DevicePipeline] = {}
    started = time.perf_counter()
    for _, payload in messages:
        frame = decode_frame(payload)
        pipeline = pipelines.setdefault(frame.device_id,
                                        DevicePipeline(frame.device_id, DetectorSettings()))
        result = pipeline.feed(frame)
        level_point(frame, result.max_dog_score).to_line_protocol()
        for event in result.events:
            event_point(event).to_line_protocol()
    elapsed = time.perf_counter() - started
    print(f"pipeline alone: {len(messages) / elapsed:.0f} frames/s on one core, i.e. one core "
          f"keeps up with about {len(messages) / elapsed:.0f} sensors in real time", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=10)
    parser.add_argument("--seconds", type=int, default=300)
    args = parser.parse_args()
    print(f"encoding {args.devices} x {args.seconds} frames ...", flush=True)
    messages = encoded_frames(args.devices, args.seconds)
    pipeline_only(messages)
    with tempfile.TemporaryDirectory() as tmp, Services(Path(tmp) / "services") as services:
        services.broker.config_path.write_text(
            services.broker.config_path.read_text() + "\nsys_interval 1\n")
        services.broker.restart()
        wire_bytes(services, Path(tmp))
        sites = Path(tmp) / "sites"
        sites.mkdir()
        for d in range(args.devices):  # every device assessed for audibility and the rules
            (sites / f"bench-{d:03d}.toml").write_text(
                site_template(f"bench-{d:03d}", source_to_sensor_m=8.0, source_to_boundary_m=12.0))
        analyzer_throughput(services, messages, sites)


if __name__ == "__main__":
    main()
