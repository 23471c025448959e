"""The analyzer's configuration file (TOML); ``barkwatch analyzer validate-config`` checks one.

Each part owns its settings type (``DetectorSettings`` in :mod:`analyzer.detect.settings`,
``AudibilitySettings``, ``RuleSettings``, ``InfluxSettings`` beside the code they drive); this
loader composes them, and nothing below it imports it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from analyzer.acoustics import AudibilitySettings
from analyzer.detect import DetectorSettings
from analyzer.ordinance import RuleSettings
from analyzer.store import InfluxSettings
from sensor.config import MqttSettings
from sensor.configfile import describe, load, setting
from sensor.errors import ConfigError
from sensor.wire import MAX_PAYLOAD_BYTES

MAX_PARTITIONS = 1024


@dataclass(frozen=True)
class Partition:
    """This analyzer's share of the fleet: share ``index`` (1-based) of ``count``.

    A device belongs to share ``crc32(device id) % count + 1``. CRC-32 (zlib) rather than
    Python's ``hash``, which is salted per process: every analyzer, on any machine and after
    any restart, must compute the same owner for a device (docs/SCALE.md).
    """

    index: int = 1
    count: int = 1

    def owns(self, device_id: str) -> bool:
        """Whether ``device_id``'s frames, heartbeats and status are this analyzer's."""
        return self.count == 1 or zlib.crc32(device_id.encode()) % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_partition(text: str, key: str = "partition") -> Partition:
    """``"K/N"`` (1 <= K <= N <= 1024) as a :class:`Partition`; ConfigError naming ``key``."""
    index_text, slash, count_text = text.partition("/")
    if not (slash and index_text.isdecimal() and count_text.isdecimal()):
        raise ConfigError(
            f"config key {key!r}: {text[:40]!r} is not of the form K/N (this analyzer's share "
            "K of N analyzers, e.g. \"1/2\")"
        )
    index, count = int(index_text), int(count_text)
    if not 1 <= count <= MAX_PARTITIONS:
        raise ConfigError(f"config key {key!r}: N = {count} in {text!r} is not between 1 and "
                          f"{MAX_PARTITIONS}")
    if not 1 <= index <= count:
        raise ConfigError(f"config key {key!r}: K = {index} in {text!r} is not between 1 and "
                          f"N = {count}")
    return Partition(index, count)


@dataclass(frozen=True)
class ClusterSettings:
    """The clustered broker (NATS JetStream, docs/SCALE.md); ``servers`` empty: Mosquitto.

    The analyzer's user name, password and CA are those of ``[mqtt]``."""

    servers: str = setting(
        "", "comma-separated NATS URLs of the cluster's nodes (tls://host:port); empty: the "
        "single MQTT broker of [mqtt]"
    )
    partitions: int = setting(
        8, "P: the partitions the cluster's subject mapping splits the fleet into (the same P "
        "as barkwatch cluster render)", 1, MAX_PARTITIONS,
    )
    lease_s: float = setting(
        15.0, "an analyzer renews its partitions' leases every second; one not renewed for "
        "this long is taken over by another (keep it above a JetStream leader election), s",
        2.0, 300.0,
    )
    journal_dir: str = setting(
        "", "folder of one journal per partition (partition-K.journal), shared by every "
        "analyzer that may take the partition over; empty: no journal"
    )
    ack_wait_s: float = setting(
        20.0, "a delivered message not acknowledged in this long is delivered again, s",
        5.0, 3600.0,
    )
    max_ack_pending: int = setting(
        4000, "messages of one partition delivered and not yet acknowledged, at most",
        10, 1000000,
    )

    def urls(self) -> list[str]:
        """The server URLs; ConfigError naming the key for a malformed one."""
        urls = [url.strip() for url in self.servers.split(",") if url.strip()]
        for url in urls:
            scheme, sep, rest = url.partition("://")
            host, colon, port = rest.rpartition(":")
            if not (sep and scheme in ("tls", "nats") and host and colon and port.isdecimal()
                    and 1 <= int(port) <= 65535):
                raise ConfigError(f"config key 'cluster.servers': {url[:80]!r} is not a NATS "
                                  "URL of the form tls://host:port")
        return urls


@dataclass(frozen=True)
class AnalyzerConfig:
    """Everything the live analyzer needs."""

    client_id: str = setting("barkwatch-analyzer", "MQTT client id of the persistent session")
    partition: str = setting(
        "1/1", "K/N: this analyzer takes the devices whose CRC-32 of the device id modulo N "
        "is K-1 and acknowledges the rest unstored; every analyzer sharing a broker has the "
        "same N, its own K and its own client_id (docs/SCALE.md)"
    )
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
    cluster: ClusterSettings = setting(ClusterSettings(), "clustered broker (docs/SCALE.md)")
    influx: InfluxSettings = setting(InfluxSettings(), "database")
    detector: DetectorSettings = setting(DetectorSettings(), "detector")
    audibility: AudibilitySettings = setting(AudibilitySettings(), "level at 100 ft, audibility")
    rules: RuleSettings = setting(RuleSettings(), "ordinance rules")
    confirm_stored: bool = setting(
        True, "after storing a device's frames, publish their sequence numbers on "
        "barkwatch/cmd/v1/<device>/stored, so that its sensor deletes them from its outbox "
        "(sensor outbox.confirm = 'analyzer'); harmless to sensors that do not listen"
    )
    drop_flood: bool = setting(
        True, "with confirm_stored: drop, acknowledged to the broker but not confirmed, a "
        "device's QoS 1 frames beyond its share of the inbox (its sensor sends them again), so "
        "a flood delays no other device. Set false while any sensor deletes at the broker's "
        "PUBACK (outbox.confirm = 'broker', or older than issue 32): its catch-up bursts "
        "would lose frames (docs/FAULTS.md)"
    )
    journal_path: str = setting(
        "", "file of each device's detection state, saved with every stored batch so "
        "that a restarted analyzer resumes events, smoothing and background where they were "
        "(docs/FAULTS.md); empty: kept in memory only (a restart loses the event open at it)"
    )
    journal_checkpoint_frames: int = setting(
        60, "the journal writes a device's detection state every this many frames and the "
        "frames' payloads between: a restart feeds each device at most this many less one "
        "frames again (about 0.2 ms each); 0 or 1: the state at every save (docs/SCALE.md)",
        0, 3600,
    )
    sites_dir: str = setting(
        "", "folder of installation records, one DEVICE.toml per device (barkwatch site create); "
        "empty: no audibility decisions"
    )

    def __post_init__(self) -> None:
        parse_partition(self.partition)  # refuse a malformed share when the file is loaded
        self.cluster.urls()  # and malformed cluster URLs

    @property
    def share(self) -> Partition:
        """The parsed ``partition``."""
        return parse_partition(self.partition)


def load_analyzer_config(path: str) -> AnalyzerConfig:
    """Load and validate an analyzer configuration file."""
    return load(AnalyzerConfig, path)


def describe_analyzer_config() -> str:
    """Every key with its default and description."""
    return "\n".join(describe(AnalyzerConfig))
