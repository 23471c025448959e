"""The analyzer's configuration file (TOML); ``barkwatch analyzer validate-config`` checks one."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sensor.config import MqttSettings
from sensor.configfile import describe, load, setting
from sensor.wire import MAX_PAYLOAD_BYTES


@dataclass(frozen=True)
class InfluxSettings:
    """Where evidence is stored: InfluxDB's v1 HTTP API (/write, /query)."""

    url: str = setting("http://127.0.0.1:8086", "base URL of InfluxDB's HTTP API")
    database: str = setting("barkwatch", "database name (created if missing)")
    username: str = setting("", "user name for InfluxDB 1.x authentication; empty = none")
    password_env: str = setting(
        "BARKWATCH_INFLUX_PASSWORD", "environment variable holding the password (or a 2.x token)"
    )
    batch_points: int = setting(5000, "points per write request at most", 1, 100000)
    timeout_s: float = setting(10.0, "HTTP timeout per request, s", 0.5, 300.0)
    retry_max_s: float = setting(30.0, "cap of the exponential retry backoff, s", 0.1, 600.0)

    def password(self) -> str | None:
        """The password from the environment, or None."""
        return os.environ.get(self.password_env) or None


@dataclass(frozen=True)
class DetectorSettings:
    """The first, simple detector and event tracker; the classifier issue replaces the score."""

    band_low_hz: float = setting(400.0, "lower edge of the bark band, Hz", 50.0, 4000.0)
    band_high_hz: float = setting(4000.0, "upper edge of the bark band, Hz", 500.0, 8000.0)
    prominence_db: float = setting(
        12.0, "bark-band rise over background scoring 0.5, dB", 1.0, 60.0
    )
    slope_db: float = setting(3.0, "dB per unit of logistic score slope", 0.1, 20.0)
    background_rise_s: float = setting(10.0, "time constant of a rising background, s", 0.5, 600.0)
    on_threshold: float = setting(0.6, "score that opens an event", 0.0, 1.0)
    off_threshold: float = setting(0.4, "score below which an event closes", 0.0, 1.0)
    min_duration_s: float = setting(0.06, "shortest event kept, s", 0.0, 10.0)
    merge_gap_s: float = setting(0.5, "events closer than this merge, s", 0.0, 30.0)


@dataclass(frozen=True)
class AnalyzerConfig:
    """Everything the live analyzer needs."""

    client_id: str = setting("barkwatch-analyzer", "MQTT client id of the persistent session")
    max_payload_bytes: int = setting(
        MAX_PAYLOAD_BYTES, "larger frames are dropped, counted", 1024, 262144
    )
    stats_interval_s: float = setting(10.0, "seconds between analyzer_stats points", 1.0, 3600.0)
    reorder_window_frames: int = setting(120, "frames held to restore capture order", 1, 3600)
    mqtt: MqttSettings = setting(MqttSettings(), "broker")
    influx: InfluxSettings = setting(InfluxSettings(), "database")
    detector: DetectorSettings = setting(DetectorSettings(), "detector")


def load_analyzer_config(path: str) -> AnalyzerConfig:
    """Load and validate an analyzer configuration file."""
    return load(AnalyzerConfig, path)


def describe_analyzer_config() -> str:
    """Every key with its default and description."""
    return "\n".join(describe(AnalyzerConfig))
