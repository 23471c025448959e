"""Durable outbox between feature extraction and publishing (SQLite).

A frame is written here before anything tries to send it and deleted only after the analyzer
confirmed it stored it (sensor/confirmations.py; or, with ``confirm = "broker"``, after the
broker's QoS 1 PUBACK), so a broker or network outage, or a restart of the sensor,
loses no frame. The next sequence number is stored with the frames, so sequence numbers are
never reused across restarts (the analyzer drops duplicates on (device, seq)).

Bounded: when ``max_frames`` frames are waiting, the oldest frame is evicted for each new one
and counted in ``evicted`` (reported in the heartbeat). Recent barking matters most to a
complaint in progress, and an outage that long (three days at the default) needs a visit.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

from sensor.errors import SensorError

log = logging.getLogger(__name__)

DEFAULT_MAX_FRAMES = 3 * 24 * 3600


class Outbox:
    """A bounded, durable FIFO of encoded frames keyed by sequence number. Thread-safe."""

    def __init__(self, path: str | Path, max_frames: int = DEFAULT_MAX_FRAMES) -> None:
        if max_frames < 1:
            raise SensorError(f"outbox max_frames must be at least 1, got {max_frames}")
        self.path = Path(path)
        self.max_frames = max_frames
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS frames (seq INTEGER PRIMARY KEY, payload BLOB NOT NULL)"
            )
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)"
            )
        except (sqlite3.Error, OSError) as exc:
            raise SensorError(f"cannot open outbox {self.path}: {exc}") from exc
        self.evicted = self._meta("evicted")

    def _meta(self, key: str) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def _set_meta(self, key: str, value: int) -> None:
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def next_seq(self) -> int:
        """The first sequence number not yet used by this device."""
        with self._lock:
            stored = self._meta("next_seq")
            row = self._db.execute("SELECT MAX(seq) FROM frames").fetchone()
            highest = row[0] if row and row[0] is not None else -1
            return max(stored, highest + 1)

    def put(self, seq: int, payload: bytes) -> None:
        """Store a frame durably; evict the oldest when full (counted)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO frames (seq, payload) VALUES (?, ?)", (seq, payload)
                )
                self._set_meta("next_seq", max(self._meta("next_seq"), seq + 1))
                (count,) = self._db.execute("SELECT COUNT(*) FROM frames").fetchone()
                excess = count - self.max_frames
                if excess > 0:
                    self._db.execute(
                        "DELETE FROM frames WHERE seq IN "
                        "(SELECT seq FROM frames ORDER BY seq LIMIT ?)",
                        (excess,),
                    )
                    self.evicted += excess
                    self._set_meta("evicted", self.evicted)
                self._db.execute("COMMIT")
            except sqlite3.Error:
                self._db.execute("ROLLBACK")
                raise
        if excess > 0:
            log.warning(
                "outbox full (%d frames): evicted %d oldest frame(s)", self.max_frames, excess
            )

    def peek(self, limit: int, after_seq: int = -1) -> list[tuple[int, bytes]]:
        """Up to ``limit`` waiting frames with seq greater than ``after_seq``, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, payload FROM frames WHERE seq > ? ORDER BY seq LIMIT ?",
                (after_seq, limit),
            ).fetchall()
        return [(int(seq), bytes(payload)) for seq, payload in rows]

    def get(self, seq: int) -> bytes | None:
        """The waiting frame numbered ``seq``, None if it is not waiting."""
        with self._lock:
            row = self._db.execute("SELECT payload FROM frames WHERE seq = ?", (seq,)).fetchone()
        return bytes(row[0]) if row else None

    def delete(self, seqs: list[int]) -> None:
        """Forget frames the broker acknowledged."""
        if not seqs:
            return
        with self._lock:
            self._db.executemany("DELETE FROM frames WHERE seq = ?", [(s,) for s in seqs])

    def delete_ranges(self, ranges: list[tuple[int, int]]) -> int:
        """Forget the frames numbered within the inclusive ``ranges`` (the analyzer confirmed
        them); how many were waiting."""
        if not ranges:
            return 0
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                deleted = sum(self._db.execute("DELETE FROM frames WHERE seq BETWEEN ? AND ?",
                                               r).rowcount for r in ranges)
                self._db.execute("COMMIT")
            except sqlite3.Error:
                self._db.execute("ROLLBACK")
                raise
        return deleted

    def backlog(self) -> int:
        """Number of frames waiting for a broker acknowledgement."""
        with self._lock:
            (count,) = self._db.execute("SELECT COUNT(*) FROM frames").fetchone()
        return int(count)

    def close(self) -> None:
        """Close the database; frames still waiting stay on disk for the next start."""
        with self._lock:
            self._db.close()
