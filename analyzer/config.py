"""The analyzer's configuration file (TOML); ``barkwatch analyzer validate-config`` checks one."""

from __future__ import annotations

import os
from dataclasses import dataclass

from analyzer.audibility import AudibilitySettings
from analyzer.rules import RuleSettings
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
    batch_bytes: int = setting(
        5_000_000, "line-protocol bytes per write request at most (InfluxDB refuses bodies over "
        "its max-body-size, 25 MB by default)", 10_000, 20_000_000,
    )
    timeout_s: float = setting(10.0, "HTTP timeout per request, s", 0.5, 300.0)
    retry_max_s: float = setting(30.0, "cap of the exponential retry backoff, s", 0.1, 600.0)
    refused_points_file: str = setting(
        "", "file that points InfluxDB refuses are appended to, in full, for inspection; "
        "empty: only logged (first 1,000 characters)"
    )
    refused_points_max_bytes: int = setting(
        100_000_000, "refused_points_file stops growing at this size (later refused points "
        "are only logged and counted)", 0, 10_000_000_000,
    )

    def password(self) -> str | None:
        """The password from the environment, or None."""
        return os.environ.get(self.password_env) or None


@dataclass(frozen=True)
class DetectorSettings:
    """The dog-vocalization classifier and the event tracker (analyzer.classifier, events).

    Scores are per 20 ms step, 0..1. Defaults were chosen on held-out recordings
    (models/MODEL_CARD.md) for few false alarms on long non-dog soundscapes.
    """

    model_path: str = setting(
        "", "classifier model file (.npz from scripts/train_classifier.py); empty = bundled"
    )
    smoothing_s: float = setting(
        0.1, "centred moving average of step scores, s (adds half of it to the delay)", 0.0, 2.0
    )
    min_band_level_db: float = setting(
        0.0,
        "steps whose loudest mel band (over the model's context) is below this, dB SPL, score 0",
        -100.0,
        100.0,
    )
    on_threshold: float = setting(0.95, "an event needs a score at least this high", 0.0, 1.0)
    off_threshold: float = setting(
        0.75, "an event spans the steps around it scoring at least this", 0.0, 1.0
    )
    min_duration_s: float = setting(0.1, "shortest event kept, s", 0.0, 10.0)
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
    reorder_wait_s: float = setting(
        30.0, "a missing frame is given up (counted lost) once a later one has waited this "
        "long, s", 0.1, 3600.0,
    )
    forget_device_after_s: float = setting(
        3600.0, "a device silent this long (analyzer's clock) has its analysis state freed; "
        "it is primed from InfluxDB again when it returns, s", 10.0, 604800.0,
    )
    max_frame_age_s: float = setting(
        604800.0, "older capture times are implausible: stored flagged, not scored, s",
        60.0, 315360000.0,
    )
    max_clock_ahead_s: float = setting(
        300.0, "capture times further ahead of this clock are implausible, s", 1.0, 86400.0
    )
    mqtt: MqttSettings = setting(MqttSettings(), "broker")
    influx: InfluxSettings = setting(InfluxSettings(), "database")
    detector: DetectorSettings = setting(DetectorSettings(), "detector")
    audibility: AudibilitySettings = setting(AudibilitySettings(), "level at 100 ft, audibility")
    rules: RuleSettings = setting(RuleSettings(), "ordinance rules")
    sites_dir: str = setting(
        "", "folder of installation records, one DEVICE.toml per device (barkwatch site create); "
        "empty: no audibility decisions"
    )


def load_analyzer_config(path: str) -> AnalyzerConfig:
    """Load and validate an analyzer configuration file."""
    return load(AnalyzerConfig, path)


def describe_analyzer_config() -> str:
    """Every key with its default and description."""
    return "\n".join(describe(AnalyzerConfig))
