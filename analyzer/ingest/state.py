"""What the live analyzer keeps: its counters and, per device, ordering and stored frames.

Owned by the analyzer's one worker thread (no locks); a device's state is dropped together when
the device goes quiet.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from analyzer.ingest.device import DeviceAnalysis
from analyzer.ingest.ordering import ReorderBuffer

if TYPE_CHECKING:
    from analyzer.ingest.saved import SavedDevice


@dataclass
class AnalyzerCounters:
    """Everything the analyzer counts; written as ``analyzer_stats`` and logged."""

    received: int = 0
    frames_stored: int = 0
    events_stored: int = 0
    findings_stored: int = 0
    duplicates: int = 0
    duplicate_time: int = 0  # a second frame of a device at a stored capture time: dropped
    retained_frames: int = 0  # frames the broker delivered as retained messages: dropped
    malformed: int = 0
    oversize: int = 0
    device_mismatch: int = 0
    implausible_time: int = 0
    clock_steps: int = 0  # frames flagged with a step of their sensor's wall clock
    bad_topic: int = 0
    other_partition: int = 0  # messages of devices another analyzer's partition owns: acked
    late_frames: int = 0
    frames_held: int = 0  # stored ahead of a missing predecessor, scored once released
    gaps_given_up: int = 0
    frames_lost: int = 0  # sequence numbers never received when their gap was given up
    sequence_restarts: int = 0
    heartbeats: int = 0
    heartbeat_malformed: int = 0
    heartbeat_implausible_time: int = 0  # stored at arrival, flagged: time outside the window
    status_changes: int = 0
    status_malformed: int = 0
    bearing_checks: int = 0  # array checks stored (sensor/bearing_report.py)
    bearing_check_malformed: int = 0  # array checks refused: oversized, malformed, mismatched
    handler_errors: int = 0  # messages whose handling raised unexpectedly: dropped
    scoring_errors: int = 0  # frames stored unscored because scoring raised
    worker_errors: int = 0
    influx_retries: int = 0
    influx_rejected_batches: int = 0
    points_refused: int = 0
    devices_forgotten: int = 0
    messages_dropped_flood: int = 0  # QoS 0 messages the full inbox dropped (inbox.py)
    frames_dropped_flood: int = 0  # QoS 1 beyond a device's inbox share: dropped, unconfirmed
    confirmations_sent: int = 0  # confirmation messages to sensors (sensor/confirmations.py)
    broker_disconnects: int = 0  # established connections lost (not failed attempts)
    connect_failures: int = 0  # connection attempts that failed (refused, TLS, login)
    devices_resumed: int = 0  # devices whose saved state a restart restored (journal.py)
    journal_errors: int = 0  # saves or restores of the journal that failed (logged)
    journal_set_aside: int = 0  # damaged journals renamed aside at start-up (journal.py)
    journal_off: int = 0  # 1: no journal could be opened, running without one (logged)


Ack = tuple[int, int, int]  # (connection generation, MQTT message id, QoS)
Key = tuple[str, int, int]  # (device id, sequence number, capture time ns)


def iso_time(time_ns: int) -> str:
    """A capture time for a log line, UTC to the millisecond."""
    try:
        return datetime.fromtimestamp(time_ns / 1e9, tz=UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return "an unrepresentable time"


class StoredFrames:
    """(sequence number, capture time) of one device's stored frames, bounded, the oldest
    forgotten first. Capture time is part of the key: a sensor whose outbox was wiped reuses
    sequence numbers for new frames, which are not duplicates."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._keys: dict[tuple[int, int], None] = {}  # insertion order = age
        self._times: dict[int, int] = {}  # capture time ns: the seq stored at it

    def __contains__(self, key: tuple[int, int]) -> bool:
        return key in self._keys

    def has_time(self, capture_ns: int) -> bool:
        """Whether a frame captured at ``capture_ns`` is stored (its ``level`` point would be
        overwritten by another one at the same time: same series, same timestamp)."""
        return capture_ns in self._times

    def add(self, key: tuple[int, int]) -> None:
        self._keys[key] = None
        self._times[key[1]] = key[0]
        if len(self._keys) > self.limit:
            seq, capture_ns = next(iter(self._keys))
            del self._keys[(seq, capture_ns)]
            if self._times.get(capture_ns) == seq:
                del self._times[capture_ns]


@dataclass
class DeviceState:
    """Everything the analyzer keeps about one device; dropped together when it goes quiet."""

    reorder: ReorderBuffer
    stored: StoredFrames
    last_seen_s: float
    analysis: DeviceAnalysis | None = None
    implausible: int = 0
    fed_end_ns: int | None = None  # end of the last frame the pipeline took (journal.py)
    resume: SavedDevice | None = None  # saved detection state, restored on first use
