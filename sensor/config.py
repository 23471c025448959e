"""The sensor's configuration file (TOML). ``barkwatch-sensor validate-config`` checks one."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sensor.configfile import describe, load, setting
from sensor.errors import ConfigError
from sensor.outbox import DEFAULT_MAX_FRAMES
from sensor.wire import DEVICE_ID_PATTERN, SUPPORTED_SAMPLE_RATES


@dataclass(frozen=True)
class MqttSettings:
    """How to reach the broker. Shared by the sensor and the analyzer."""

    host: str = setting("127.0.0.1", "broker host name or address")
    port: int = setting(1883, "broker port (8883 for TLS)", 1, 65535)
    username: str = setting("", "user name; a device uses its device id")
    password_env: str = setting(
        "BARKWATCH_MQTT_PASSWORD", "environment variable holding the password"
    )
    tls_ca: str = setting("", "CA certificate file; empty means no TLS")
    keepalive_s: int = setting(30, "MQTT keepalive interval, seconds", 5, 600)
    reconnect_max_s: int = setting(30, "cap of the exponential reconnect backoff, s", 1, 600)

    def password(self) -> str | None:
        """The password from the environment, or None when the variable is unset or empty."""
        return os.environ.get(self.password_env) or None


@dataclass(frozen=True)
class AudioSettings:
    """Capture settings."""

    device: str = setting("", "input device name (substring) or index; empty = default")
    sample_rate: int = setting(
        48000, "capture rate, Hz (48000 for class 1 weighting)", choices=SUPPORTED_SAMPLE_RATES
    )
    channel: int = setting(0, "input channel that carries the measurement microphone", 0, 31)
    block_s: float = setting(0.1, "capture block length handed from the callback, s", 0.01, 1.0)
    queue_blocks: int = setting(
        600, "capture queue length in blocks; full = dropped, counted", 4, 100000
    )


@dataclass(frozen=True)
class CalibrationSettings:
    """Acoustic calibration of the microphone chain."""

    full_scale_db: float = setting(
        120.0, "dB SPL read by a signal whose RMS is full scale", 60.0, 200.0
    )
    date: str = setting("", "date of the last acoustic calibration (ISO 8601)")
    calibrator: str = setting("", "make, model and serial of the calibrator used")


@dataclass(frozen=True)
class OutboxSettings:
    """The durable outbox between feature extraction and publishing."""

    path: str = setting("/var/lib/barkwatch/outbox.sqlite", "SQLite file of waiting frames")
    max_frames: int = setting(
        DEFAULT_MAX_FRAMES, "frames kept at most; oldest evicted, counted", 60, 10_000_000
    )


@dataclass(frozen=True)
class SensorConfig:
    """Everything a sensor node needs; see ``barkwatch-sensor validate-config --describe``."""

    device_id: str = setting("", "device id, also the MQTT user name: [a-z0-9][a-z0-9_-]*")
    heartbeat_interval_s: float = setting(30.0, "seconds between heartbeats", 1.0, 3600.0)
    max_inflight: int = setting(100, "frames published but not yet acknowledged", 1, 10000)
    audio: AudioSettings = setting(AudioSettings(), "capture")
    calibration: CalibrationSettings = setting(CalibrationSettings(), "calibration")
    mqtt: MqttSettings = setting(MqttSettings(), "broker")
    outbox: OutboxSettings = setting(OutboxSettings(), "outbox")


def load_sensor_config(path: str) -> SensorConfig:
    """Load and validate a sensor configuration file."""
    config = load(SensorConfig, path)
    if not DEVICE_ID_PATTERN.match(config.device_id):
        raise ConfigError(
            f"config key 'device_id': {config.device_id!r} is missing or not a valid device id "
            "(lower-case letters, digits, '-' and '_', at most 64 characters)"
        )
    return config


def describe_sensor_config() -> str:
    """Every key with its default and description."""
    return "\n".join(describe(SensorConfig))
