"""The analyzer's configuration file (TOML); ``barkwatch analyzer validate-config`` checks one.

Each part owns its settings type (``DetectorSettings`` in :mod:`analyzer.detect.settings`,
``AudibilitySettings``, ``RuleSettings``, ``InfluxSettings`` beside the code they drive); this
loader composes them, and nothing below it imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.acoustics import AudibilitySettings
from analyzer.detect import DetectorSettings
from analyzer.ordinance import RuleSettings
from analyzer.store import InfluxSettings
from sensor.config import MqttSettings
from sensor.configfile import describe, load, setting
from sensor.wire import MAX_PAYLOAD_BYTES


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
