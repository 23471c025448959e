"""The sensor's configuration file (TOML). ``barkwatch-sensor validate-config`` checks one."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

from sensor.array import NO_ARRAY, ArraySettings
from sensor.calibration import DEFAULT_FULL_SCALE_DB
from sensor.configfile import describe, load, setting
from sensor.errors import ConfigError
from sensor.frames import MeasurementOptions
from sensor.gate import GateSettings
from sensor.outbox import DEFAULT_MAX_FRAMES
from sensor.tls import tls_context
from sensor.wire import DEVICE_ID_PATTERN, MAX_CALIBRATION_CHARS, SUPPORTED_SAMPLE_RATES


@dataclass(frozen=True)
class MqttSettings:
    """How to reach the broker. Shared by the sensor and the analyzer.

    The password is never in this file: it comes from the environment variable
    ``password_env`` or, when that is unset, from ``password_file``. There is deliberately no
    option to skip verifying the broker's certificate.
    """

    host: str = setting("127.0.0.1", "broker host name or address (must match its certificate)")
    port: int = setting(1883, "broker port (8883 for TLS)", 1, 65535)
    username: str = setting("", "user name; a device uses its device id")
    password_env: str = setting(
        "BARKWATCH_MQTT_PASSWORD", "environment variable holding the password; empty = none"
    )
    password_file: str = setting(
        "", "file holding the password (chmod 600), read when the variable is unset"
    )
    tls_ca: str = setting("", "CA certificate that signed the broker's; empty means no TLS")
    protocol: str = setting(
        "mqttv5", "MQTT version: mqttv5 (denials reported) or mqttv311",
        choices=("mqttv5", "mqttv311"),
    )
    session_expiry_s: int = setting(
        604800, "MQTT 5: how long the broker keeps the session and its queue while away, s",
        0, 4294967295,
    )
    keepalive_s: int = setting(30, "MQTT keepalive interval, seconds", 5, 600)
    reconnect_max_s: int = setting(30, "cap of the exponential reconnect backoff, s", 1, 600)
    fallback_brokers: str = setting(
        "", "other nodes of a clustered broker, comma-separated host:port: after a failed "
        "attempt or a lost connection the next one is tried, in turn (empty = host only)"
    )

    def brokers(self) -> list[tuple[str, int]]:
        """(host, port) of ``host`` and then of each fallback broker, in the order tried.
        Raise ConfigError naming the key for a malformed fallback."""
        out = [(self.host, self.port)]
        for entry in (e.strip() for e in self.fallback_brokers.split(",")):
            if not entry:
                continue
            host, colon, port = entry.rpartition(":")
            host = host.strip("[]")  # [::1]:8883
            if not (host and colon and port.isdecimal() and 1 <= int(port) <= 65535):
                raise ConfigError(f"config key 'mqtt.fallback_brokers': {entry[:80]!r} is not "
                                  "host:port (a port from 1 to 65535)")
            out.append((host, int(port)))
        return out

    def password(self) -> str | None:
        """The password: the environment variable if set and not empty, else the first line
        of ``password_file``, else None. Raise ConfigError when the file cannot be read, is not
        UTF-8 or is readable by group or others (it must be private to the service's user)."""
        from_env = os.environ.get(self.password_env)
        if from_env or not self.password_file:
            return from_env or None
        key = "config key 'mqtt.password_file'"
        try:
            mode = os.stat(self.password_file).st_mode
            if mode & 0o077:
                raise ConfigError(
                    f"{key}: {self.password_file} is readable by "
                    f"group or others (mode {mode & 0o777:o}); chmod 600 it"
                )
            with open(self.password_file, encoding="utf-8") as handle:
                first_line = handle.readline().strip()
        except OSError as exc:
            raise ConfigError(
                f"{key}: cannot read {self.password_file} as user {_user_name()}: "
                f"{exc.strerror}"
            ) from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{key}: {self.password_file} is not UTF-8 text (byte offset {exc.start})"
            ) from exc
        except ValueError as exc:  # os.stat refuses a path with a NUL byte
            raise ConfigError(f"{key}: {self.password_file!r} is not a usable path: {exc}") from exc
        if not first_line:
            raise ConfigError(f"{key}: {self.password_file} is empty")
        return first_line

    def login(self) -> tuple[str, str] | None:
        """User name and password to connect with; None when there is no user name.

        Raise ConfigError when a user name has no password, or as :meth:`password` does.
        ``run`` connects with this and ``validate-config`` calls it (through
        :func:`check_connection_settings`), so both refuse the same settings.
        """
        if not self.username:
            return None
        password = self.password()
        if password is None:
            raise ConfigError(
                f"config key 'mqtt.username' is {self.username!r} but there is no password: "
                f"set the environment variable {self.password_env} or mqtt.password_file"
            )
        return self.username, password


def _user_name() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a uid without a passwd entry (containers)
        return str(os.geteuid())


def check_connection_settings(settings: MqttSettings) -> None:
    """Refuse what ``run`` would refuse before connecting: a user name without a password,
    a password file that is unsafe or unreadable, a CA certificate that cannot be loaded.

    ``validate-config`` calls this so that it passes only what ``run`` accepts; the checks are
    the very functions the publisher's ``make_client`` uses. Nothing is connected.
    """
    settings.login()
    settings.brokers()
    if settings.tls_ca:
        tls_context(settings.tls_ca)


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
        DEFAULT_FULL_SCALE_DB, "dB SPL read by a signal whose RMS is full scale", 60.0, 200.0
    )
    date: str = setting("", "date of the last acoustic calibration (ISO 8601)")
    calibrator: str = setting("", "make, model and serial of the calibrator used")
    reference_level_db: float = setting(
        94.0, "level the calibrator produces at 1 kHz, dB SPL (94 or 114)", 74.0, 124.0
    )


@dataclass(frozen=True)
class MeasurementSettings:
    """The microphone chain's limits and the derived levels in every frame."""

    microphone: str = setting("", "make, model and serial of the measurement microphone")
    noise_floor_dba: float = setting(
        0.0, "self-noise of the microphone chain, A-weighted dB SPL; 0 = unknown (no flag)",
        0.0, 80.0,
    )
    under_range_margin_db: float = setting(
        5.0, "frames with LAeq within this of the noise floor are flagged under-range",
        0.0, 30.0,
    )
    percentile_window_s: float = setting(
        60.0, "LAF10/50/90 cover the LAF samples of this many seconds", 1.0, 3600.0
    )

    def options(self) -> MeasurementOptions:
        """The frame builder's view of these settings."""
        return MeasurementOptions(
            percentile_window_s=self.percentile_window_s,
            noise_floor_dba=self.noise_floor_dba or None,
            under_range_margin_db=self.under_range_margin_db,
        )


@dataclass(frozen=True)
class OutboxSettings:
    """The durable outbox between feature extraction and publishing."""

    path: str = setting("/var/lib/barkwatch/outbox.sqlite", "SQLite file of waiting frames")
    max_frames: int = setting(
        DEFAULT_MAX_FRAMES, "frames kept at most; oldest evicted, counted", 60, 10_000_000
    )
    confirm: str = setting(
        "analyzer", "when a frame leaves the outbox: 'analyzer' once the analyzer confirms it "
        "stored it (barkwatch/cmd/v1/<device>/stored; the broker may drop what it "
        "acknowledged), 'broker' at the broker's PUBACK (analyzers older than issue 32)"
    )
    max_unconfirmed: int = setting(
        120, "frames sent and not yet confirmed by the analyzer, at most", 1, 1000
    )
    confirm_timeout_s: float = setting(
        10.0, "a frame the analyzer has not confirmed this long after the broker's PUBACK is "
        "sent again, each further time after twice as long, s", 1.0, 600.0
    )
    confirm_resend_max_s: float = setting(
        120.0, "the longest wait before sending an unconfirmed frame again, s", 1.0, 3600.0
    )

    def __post_init__(self) -> None:
        if self.confirm not in ("analyzer", "broker"):
            raise ConfigError(f"config key 'outbox.confirm': {self.confirm[:40]!r} is not "
                              "'analyzer' or 'broker'")


@dataclass(frozen=True)
class SensorConfig:
    """Everything a sensor node needs; see ``barkwatch-sensor validate-config --describe``."""

    device_id: str = setting("", "device id, also the MQTT user name: [a-z0-9][a-z0-9_-]*")
    heartbeat_interval_s: float = setting(30.0, "seconds between heartbeats", 1.0, 3600.0)
    max_inflight: int = setting(100, "frames published but not yet acknowledged", 1, 10000)
    audio: AudioSettings = setting(AudioSettings(), "capture")
    calibration: CalibrationSettings = setting(CalibrationSettings(), "calibration")
    measurement: MeasurementSettings = setting(MeasurementSettings(), "measurement")
    mqtt: MqttSettings = setting(MqttSettings(), "broker")
    outbox: OutboxSettings = setting(OutboxSettings(), "outbox")
    privacy: GateSettings = setting(GateSettings(), "the speech gate (wire v3)")
    array: ArraySettings = setting(ArraySettings(), "microphone array: the bearing of dog "
                                   "seconds (issue 36, docs/BEARING.md)")

    @property
    def input_channels(self) -> int:
        """How many input channels capture opens: up to the measurement channel and every
        capsule's."""
        return max((self.audio.channel, *self.array.channels)) + 1


def load_sensor_config(path: str) -> SensorConfig:
    """Load and validate a sensor configuration file."""
    config = load(SensorConfig, path)
    if not DEVICE_ID_PATTERN.match(config.device_id):
        raise ConfigError(
            f"config key 'device_id': {config.device_id!r} is missing or not a valid device id "
            "(lower-case letters, digits, '-' and '_', at most 64 characters)"
        )
    date = config.calibration.date
    if len(date) > MAX_CALIBRATION_CHARS or not date.isprintable():  # every frame carries it
        raise ConfigError(
            f"config key 'calibration.date': {len(date)} characters; the wire format takes "
            f"at most {MAX_CALIBRATION_CHARS} printable ones"
        )
    if config.array.preset != NO_ARRAY and config.audio.channel not in config.array.channels:
        raise ConfigError(
            f"config key 'audio.channel': channel {config.audio.channel} is not one of the "
            f"array's capsules {list(config.array.channels)} (array.channels): the levels are "
            "measured on one capsule of the array, the one calibrated"
        )
    return config


def validate_sensor_config(path: str) -> SensorConfig:
    """``validate-config``: load the file and apply the checks ``run`` makes before it
    connects (:func:`check_connection_settings`)."""
    config = load_sensor_config(path)
    check_connection_settings(config.mqtt)
    return config


def describe_sensor_config() -> str:
    """Every key with its default and description."""
    return "\n".join(describe(SensorConfig))
