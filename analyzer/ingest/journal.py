"""Each device's analysis state on the analyzer's disk, so that a restarted analyzer resumes it.

A frame's MQTT message is acknowledged once its points are stored; the scorer's smoothing, the
YAMNet patches that span frames, the event being tracked, the audibility background and the
frames waiting for a missing predecessor lived in memory only, so a killed analyzer restarted
detection afresh at the first unacknowledged frame: that frame was scored without its
predecessor and the event open at the kill lost its start (docs/FAULTS.md, defect 2).

Now, after every stored batch and before its acknowledgements, the state of each device the
batch touched is saved here (one SQLite transaction, WAL): the pipeline's checkpoint
(:meth:`analyzer.detect.DevicePipeline.checkpoint`), the audibility assessor, the reorder
buffer, and the keys of the frames stored in the last ``KEEP_STORED_S`` of capture time. A
restarted analyzer restores them before it takes a frame: a redelivered frame that was stored
is a duplicate, the next one continues the state exactly where the killed process left it. A
crash between the batch's write and this save leaves the previous state and the batch's frames
unacknowledged: they are processed again from that state and give the same points, which
InfluxDB overwrites (same series and time). The rules are not saved: they are primed from
InfluxDB as before (``analyzer.ingest.device``).

A saved detection state is used only with the detector settings, dog head and installation
record it was made with (``context``); otherwise the device starts afresh, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import pickle
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from analyzer.files import set_sqlite_file_aside
from analyzer.ingest.device import DeviceAnalysis
from analyzer.ingest.ordering import ReorderBuffer
from sensor.wire import Frame

log = logging.getLogger(__name__)

# Of the pickled state: a saved state of another format is not restored. Raise it with any
# change to what DevicePipeline, EventTracker, AudibilityAssessor or ReorderBuffer keep.
FORMAT = 2  # 2: waiting frames are rows of held_frames, no longer in the pickled buffer
# Keys of frames stored this recently (capture time) are kept, so that copies redelivered after
# a restart are known as duplicates: the broker redelivers what was not acknowledged, and the
# sensor re-sends the frames acknowledged in its last 60 s after a broker restart
# (sensor/publisher.py RESEND_WINDOW_S).
KEEP_STORED_S = 600
NS = 1_000_000_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS device_state (
    device TEXT PRIMARY KEY,
    format INTEGER NOT NULL,
    state BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS held_frames (
    device TEXT NOT NULL,
    seq INTEGER NOT NULL,
    capture_ns INTEGER NOT NULL,
    frame BLOB NOT NULL,
    PRIMARY KEY (device, seq, capture_ns)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stored_frames (
    device TEXT NOT NULL,
    seq INTEGER NOT NULL,
    capture_ns INTEGER NOT NULL,
    PRIMARY KEY (device, seq, capture_ns)
) WITHOUT ROWID;
"""


# The columns each table must have, in order: a file with other tables of these names (another
# program's, an older format's) is damaged for this analyzer and set aside.
_COLUMNS = {"device_state": ["device", "format", "state"],
            "stored_frames": ["device", "seq", "capture_ns"],
            "held_frames": ["device", "seq", "capture_ns", "frame"]}
SET_ASIDE_LABEL = "damaged"  # journal.sqlite.damaged-20261202T142600Z


class JournalError(Exception):
    """The journal could not be read or written; the message names the file and why."""


def set_aside(path: Path, now: datetime | None = None) -> Path:
    """Rename the damaged journal ``path`` (and its ``-wal`` and ``-shm`` files) to
    ``PATH.damaged-YYYYMMDDTHHMMSSZ`` beside it, kept for inspection; the new name. Raises
    OSError when it cannot be renamed."""
    return set_sqlite_file_aside(path, SET_ASIDE_LABEL, now)


def detection_context(analysis: DeviceAnalysis) -> str:
    """What a saved detection state was made with: detector settings, dog head, audibility
    settings and installation record. A state is restored only into the same context."""
    pipeline, assessor = analysis.pipeline, analysis.assessor
    parts = (FORMAT, repr(pipeline.settings), pipeline.head.version,
             repr(assessor.settings) if assessor is not None else "",
             repr(assessor.site) if assessor is not None else "")
    return hashlib.sha256(repr(parts).encode()).hexdigest()


@dataclass
class SavedDevice:
    """One device's state as a restarted analyzer finds it."""

    device: str
    reorder: ReorderBuffer
    implausible: int
    fed_end_ns: int | None  # end of the last frame the pipeline took (None: none yet)
    context: str  # detection_context of the saved detection state ("" when none)
    pipeline: dict[str, Any] | None  # DevicePipeline.checkpoint()
    assessor: Any  # the AudibilityAssessor, or None
    stored: list[tuple[int, int]] = field(default_factory=list)  # (seq, capture ns)
    held: list[Frame] = field(default_factory=list)  # frames waiting for a predecessor

    def restore_into(self, analysis: DeviceAnalysis) -> bool:
        """Put the saved detection state into ``analysis`` (freshly made and primed) if it was
        made in the same context; False (nothing changed) if not."""
        if self.pipeline is None or self.context != detection_context(analysis):
            return False
        analysis.pipeline.restore(self.pipeline)
        if analysis.assessor is not None and self.assessor is not None:
            analysis.assessor = self.assessor
        return True


def device_state_blob(reorder: ReorderBuffer, implausible: int, fed_end_ns: int | None,
                      analysis: DeviceAnalysis | None, pending: SavedDevice | None = None
                      ) -> bytes:
    """One device's state, as saved; ``pending``: a restored state not yet put into an
    analysis (kept as it was saved)."""
    detection: dict[str, Any] | None = None
    if analysis is None and pending is not None and pending.pipeline is not None:
        detection = {"context": pending.context, "pipeline": pending.pipeline,
                     "assessor": pending.assessor}
    if analysis is not None:
        detection = {"context": detection_context(analysis),
                     "pipeline": analysis.pipeline.checkpoint(),
                     "assessor": analysis.assessor}
    # Without its waiting frames: those are rows of held_frames, written once when a frame
    # starts waiting and deleted when it is released (HeldChanges), never with every save:
    # 40 devices holding 119 frames each stalled storage about 30 s per save (issue 32, 4).
    return pickle.dumps({"reorder": reorder.without_held(), "implausible": implausible,
                         "fed_end_ns": fed_end_ns, "detection": detection},
                        protocol=pickle.HIGHEST_PROTOCOL)


@dataclass
class HeldChanges:
    """Frames that began waiting (``added``: device, frame) and that were released
    (``removed``: device, seq, capture ns) since the last save."""

    added: list[tuple[str, Frame]] = field(default_factory=list)
    removed: list[tuple[str, int, int]] = field(default_factory=list)


class DeviceJournal:
    """The SQLite file at ``path`` (made if missing). Owned by the analyzer's worker thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), isolation_level=None)
            problem = self._damage()  # before anything writes: a damaged file stays as found
            if problem:
                raise JournalError(f"analyzer journal {self.path}: {problem}")
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL: a power cut may lose the last saves, never the file's integrity; a lost
            # save only means its frames are processed again (see the module docstring).
            self._db.execute("PRAGMA synchronous=NORMAL")
            # INCREMENTAL: freed pages are handed back to the file system at every save, so
            # the file shrinks when held frames are released (it never did: issue 32, 4).
            if self._db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
                self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
                self._db.execute("VACUUM")  # auto_vacuum takes effect only after one
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            self._close_quietly()
            raise JournalError(f"analyzer journal {self.path}: {exc}") from exc
        except JournalError:
            self._close_quietly()
            raise

    def _damage(self) -> str | None:
        """What makes the open file unusable as this journal (SQLite's quick check, tables of
        another shape), or None."""
        check = [row[0] for row in self._db.execute("PRAGMA quick_check(5)").fetchall()]
        if check != ["ok"]:
            said = "; ".join(str(c) for c in check).replace("\n", "; ")
            return f"integrity check failed: {said[:500]}"
        for table, columns in _COLUMNS.items():
            found = [row[1] for row in self._db.execute(f"PRAGMA table_info({table})")]
            if found and found != columns:  # missing tables are made
                return f"table {table} has columns {found}, this analyzer needs {columns}"
        return None

    def _close_quietly(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    @property
    def empty(self) -> bool:
        """Whether the journal holds no device state (new, or emptied)."""
        try:
            return self._db.execute("SELECT 1 FROM device_state LIMIT 1").fetchone() is None
        except sqlite3.Error as exc:
            raise JournalError(f"analyzer journal {self.path}: reading failed: {exc}") from exc

    def close(self) -> None:
        """Close the file."""
        self._db.close()

    def save(self, states: Mapping[str, bytes | None], stored: Iterable[tuple[str, int, int]],
             held: HeldChanges | None = None) -> None:
        """In one transaction: each device's state (None: forget the device), the keys
        (device, seq, capture ns) of frames just stored, and the ``held`` frames that began or
        stopped waiting; keys older than ``KEEP_STORED_S`` before a device's newest are
        trimmed. Freed pages go back to the file system (the file shrinks)."""
        held = held or HeldChanges()
        keys = list(stored)
        newest: dict[str, int] = {}
        for device, _, capture_ns in keys:
            newest[device] = max(capture_ns, newest.get(device, capture_ns))
        try:
            with self._db:  # BEGIN ... COMMIT, ROLLBACK on error
                self._db.execute("BEGIN")
                for device, blob in states.items():
                    if blob is None:
                        self._db.execute("DELETE FROM device_state WHERE device = ?", (device,))
                        self._db.execute("DELETE FROM stored_frames WHERE device = ?", (device,))
                        self._db.execute("DELETE FROM held_frames WHERE device = ?", (device,))
                    else:
                        self._db.execute("INSERT OR REPLACE INTO device_state VALUES (?, ?, ?)",
                                         (device, FORMAT, blob))
                self._db.executemany("INSERT OR IGNORE INTO stored_frames VALUES (?, ?, ?)",
                                     [k for k in keys if states.get(k[0], b"") is not None])
                for device, capture_ns in newest.items():
                    self._db.execute(
                        "DELETE FROM stored_frames WHERE device = ? AND capture_ns < ?",
                        (device, capture_ns - KEEP_STORED_S * NS))
                self._db.executemany("DELETE FROM held_frames WHERE device = ? AND seq = ? "
                                     "AND capture_ns = ?", held.removed)
                self._db.executemany(
                    "INSERT OR REPLACE INTO held_frames VALUES (?, ?, ?, ?)",
                    [(device, frame.seq, frame.capture_ns,
                      pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL))
                     for device, frame in held.added if states.get(device, b"") is not None])
            # executescript steps it to the end (execute frees one page per call)
            self._db.executescript("PRAGMA incremental_vacuum")
        except sqlite3.Error as exc:
            raise JournalError(f"analyzer journal {self.path}: saving failed: {exc}") from exc

    def load(self) -> tuple[list[SavedDevice], list[str]]:
        """Every saved device, and a line for each one whose state could not be read (those
        start afresh)."""
        try:
            rows = self._db.execute("SELECT device, format, state FROM device_state").fetchall()
            keys = self._db.execute(
                "SELECT device, seq, capture_ns FROM stored_frames ORDER BY device, capture_ns"
            ).fetchall()
            held_rows = self._db.execute(
                "SELECT device, frame FROM held_frames ORDER BY device, seq").fetchall()
        except sqlite3.Error as exc:
            raise JournalError(f"analyzer journal {self.path}: reading failed: {exc}") from exc
        held: dict[str, list[Frame]] = {}
        for device, blob in held_rows:
            try:
                held.setdefault(device, []).append(pickle.loads(blob))  # noqa: S301 (ours)
            except Exception as exc:  # that frame is not restored; it is stored already
                log.error("analyzer journal %s: a held frame of %s is unreadable (%s: %s)",
                          self.path, device, type(exc).__name__, exc)
        stored: dict[str, list[tuple[int, int]]] = {}
        for device, seq, capture_ns in keys:
            stored.setdefault(device, []).append((seq, capture_ns))
        saved, problems = [], []
        for device, fmt, blob in rows:
            if fmt != FORMAT:
                problems.append(f"{device}: saved in format {fmt}, this analyzer reads {FORMAT}")
                continue
            try:
                # The analyzer's own file in its state directory, written by this code.
                state = pickle.loads(blob)  # noqa: S301
                detection = state["detection"] or {}
                saved.append(SavedDevice(
                    device, state["reorder"], int(state["implausible"]), state["fed_end_ns"],
                    detection.get("context", ""), detection.get("pipeline"),
                    detection.get("assessor"), stored.get(device, []), held.get(device, [])))
            except Exception as exc:  # any unreadable state: that device starts afresh
                problems.append(f"{device}: {type(exc).__name__}: {exc}")
        return saved, problems
