"""Shared fixtures: real local services, short real recordings, bounded waiting."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
import pytest
import soundfile

from analyzer.config import AnalyzerConfig
from analyzer.deploy.services import LocalDeployment, Mosquitto, Services
from analyzer.ingest.service import Analyzer

ROOT = Path(__file__).resolve().parent.parent
DEMO_RECORDING = ROOT / "demo" / "example.flac"


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    """A real Mosquitto and a real InfluxDB on free loopback ports, stopped afterwards."""
    with Services(tmp_path / "services") as running:
        yield running


@pytest.fixture
def broker(deployment: LocalDeployment, tmp_path: Path) -> Iterator[Mosquitto]:
    """The secured broker of the test module's ``deployment`` fixture, running: a TLS listener
    for devices, a plain loopback listener for the analyzer."""
    running = Mosquitto(tmp_path / "mosquitto", security=deployment.files)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def write_excerpt(path: Path, start_s: float, duration_s: float) -> Path:
    """Write part of the bundled (real, CC BY 4.0) demo recording to ``path``."""
    audio, rate = soundfile.read(DEMO_RECORDING, dtype="float64")
    first = round(start_s * rate)
    soundfile.write(path, audio[first : first + round(duration_s * rate)], rate, subtype="FLOAT")
    return path


@pytest.fixture
def excerpt_20s(tmp_path: Path) -> Path:
    """20 s of the demo recording with barking in it (70-90 s), as a float WAV."""
    return write_excerpt(tmp_path / "excerpt.wav", 70.0, 20.0)


def wait_until(condition: Callable[[], bool], timeout_s: float = 120.0,
               what: str = "condition") -> None:
    """Poll until ``condition`` holds; fail (never hang) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what} after {timeout_s:.0f} s")
        time.sleep(0.05)


def sine(frequency_hz: float, rms: float, duration_s: float, rate: int) -> np.ndarray:
    """A sine of the given RMS (full scale = 1)."""
    t = np.arange(round(duration_s * rate)) / rate
    return rms * np.sqrt(2.0) * np.sin(2.0 * np.pi * frequency_hz * t)


def publish_through_analyzer(config: AnalyzerConfig, topic: str, payloads: list[bytes],
                             stored: int) -> Analyzer:
    """Run a live analyzer, publish ``payloads`` on ``topic`` at QoS 1 in order, wait until it
    has stored ``stored`` frames, stop it and return it (for its counters)."""
    analyzer = Analyzer(config)
    analyzer.start()
    publisher = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
    publisher.connect(config.mqtt.host, config.mqtt.port)
    publisher.loop_start()
    try:
        wait_until(analyzer.connected.is_set, what="the analyzer to connect")
        for payload in payloads:
            publisher.publish(topic, payload, qos=1).wait_for_publish(timeout=10)
        wait_until(lambda: analyzer.counters.frames_stored == stored,
                   what=f"{stored} stored frames")
    finally:
        publisher.disconnect()
        publisher.loop_stop()
        analyzer.stop()
    return analyzer
