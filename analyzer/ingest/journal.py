"""Each device's analysis state on the analyzer's disk, so that a restarted analyzer resumes it.

A frame's MQTT message is acknowledged once its points are stored; the scorer's smoothing, the
YAMNet patches that span frames, the event being tracked, the audibility background and the
frames waiting for a missing predecessor lived in memory only, so a killed analyzer restarted
detection afresh at the first unacknowledged frame: that frame was scored without its
predecessor and the event open at the kill lost its start (docs/FAULTS.md, defect 2).

Now, after every stored batch and before its acknowledgements, what changed in each device
the batch touched is appended to the journal as one record (:mod:`analyzer.ingest.journal_format`:
versioned header, length-prefixed records with a CRC-32): the reorder buffer's counts, the
implausible count, the end of the last frame fed, the frames that began or stopped waiting
(their wire payloads), and the keys of the frames stored in the last ``KEEP_STORED_S`` of
capture time. The detection state itself (format 5) is journalled by **the frames fed to it**:
their wire payloads, bytes already, nothing to encode; every ``checkpoint_frames`` frames of a
device (and at a rewrite and a clean shutdown) a **checkpoint** of it is written instead, as
format 4 wrote it at every save: the pipeline's checkpoint
(:meth:`analyzer.detect.DevicePipeline.checkpoint`, a few KB) and the entries the audibility
assessor's stores gained and how many they dropped from their old end since the previous
checkpoint (its recent spectra and the background's seconds: pickling the whole assessor wrote
its 160 KiB every time, issue 37). When the file has grown to twice what the state itself takes
(at least ``COMPACT_MIN_BYTES``) it is rewritten as one full checkpoint per device
(:meth:`DeviceJournal.compact`), written aside and renamed over the old one.

A restarted analyzer replays the records before it takes a frame: a redelivered frame that was
stored is a duplicate, the next one continues the state exactly where the killed process left
it. A device's detection state is its latest checkpoint, into which the frames journalled after
it are fed again when the device is first used
(:meth:`analyzer.ingest.saved.SavedDevice.restore_into`: the pipeline and the assessor's
observation, the same code on the same bytes, so the state ends bit for bit where it was on the
same machine; nothing is stored, published or acknowledged). The
reorder buffer, plausibility and de-duplication are not run again: their outcomes (a few
integers, which depend on the clocks) are in the records. A crash between the batch's write and
its record leaves the previous state and the batch's frames unacknowledged: they are processed
again from that state and give the same points, which InfluxDB overwrites (same series and
time). The rules are not saved: they are primed from InfluxDB as before
(``analyzer.ingest.device``), which holds the events of the frames fed again. A record cut
short or failing its checksum ends the replay there (:attr:`DeviceJournal.damage` names the
file and the offset): the state saved before it (a checkpoint and the frames after it) is
restored, the damaged file is set aside and a new one written from that state
(``analyzer.ingest.keeper``).

Which state is saved is found, not listed (:mod:`analyzer.ingest.saved`): a list or deque
attribute of the assessor is a store, journalled by what it gained and lost at its ends,
anything else a value, written whole at every checkpoint (the pipeline's counters move at
every frame). Where each part lives is found once per analysis
(:class:`analyzer.ingest.saved.PartsLayout`) and checked, not walked again, at each save.

A saved detection state is used only with the detector settings, dog head and installation
record it was made with (``context``); otherwise the device starts afresh, as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from analyzer.files import set_sqlite_file_aside
from analyzer.ingest.device import DeviceAnalysis
from analyzer.ingest.journal_format import (
    HEADER,
    ROWS_FROM,
    DamagedRecord,
    JournalFormatError,
    StateEncoder,
    StateFormatError,
    check_header,
    read_records,
    record,
    unpack,
)
from analyzer.ingest.saved import (
    ASSESSOR,
    VALUES,
    Held,
    LiveDevice,
    PartsLayout,
    Replayed,
    SavedDevice,
    detection_context,
    is_store,
    keep_recent,
)
from sensor.errors import WireError
from sensor.wire import encode_frame

log = logging.getLogger(__name__)

COMPACT_MIN_BYTES = 64 * 1024 * 1024
COMPACT_RATIO = 2.0  # rewritten when the file is this many times the last full rewrite
# A device's detection state is checkpointed at every this many frames fed, and the frames
# between are journalled as their payloads: a restart feeds again at most this many less one
# (about 0.2 ms each, docs/SCALE.md). The analyzer's setting journal_checkpoint_frames.
CHECKPOINT_FRAMES = 60
SET_ASIDE_LABEL = "damaged"  # journal.sqlite.damaged-20261202T142600Z


class JournalError(Exception):
    """The journal could not be read or written; the message names the file and why."""


class UnsaveableState(JournalError):
    """A save was written without the devices whose state cannot be encoded (named): those
    are forgotten by the journal, so a restart starts them afresh."""


def set_aside(path: Path, now: datetime | None = None) -> Path:
    """Rename the damaged journal ``path`` to ``PATH.damaged-YYYYMMDDTHHMMSSZ`` beside it,
    kept for inspection; the new name. Raises OSError when it cannot be renamed."""
    return set_sqlite_file_aside(path, SET_ASIDE_LABEL, now)


@dataclass
class _Written:
    """What the journal holds of one device, as its writer knows it (to write what changed)."""

    held: set[Held] = field(default_factory=set)
    stored: deque[tuple[int, int]] = field(default_factory=deque)
    detection: DeviceAnalysis | None = None  # the analysis whose parts the mirrors follow
    has_detection: bool = False
    mirrors: dict[str, deque[Any]] = field(default_factory=dict)  # stores: entries held
    layout: PartsLayout | None = None  # where the parts of ``detection`` are
    since: int = 0  # frames journalled after the checkpoint it holds (a restart feeds them)


def _store_change(mirror: deque[Any], current: deque[Any] | list[Any]
                  ) -> tuple[int, list[Any]] | None:
    """How ``current`` differs from ``mirror`` (what the journal holds of it, updated here):
    entries dropped from its old end and entries added at its new end. None when it changed
    otherwise (the caller writes it whole)."""
    dropped = 0
    if current:
        first = current[0]
        while mirror and mirror[0] is not first:
            mirror.popleft()
            dropped += 1
    else:
        dropped = len(mirror)
        mirror.clear()
    kept = len(mirror)
    extra = len(current) - kept
    if extra < 0 or (kept and current[kept - 1] is not mirror[-1]):
        return None
    if extra == 0:
        return dropped, []
    # From the new end (a deque's index is quick near either end): one entry a frame.
    added = [current[-1]] if extra == 1 else [current[i] for i in range(-extra, 0)]
    mirror.extend(added)
    return dropped, added


class DeviceJournal:
    """The journal file at ``path`` (made if missing), replayed when opened; a device's
    detection state is checkpointed every ``checkpoint_frames`` frames fed (0 or 1: at every
    save that fed one). Owned by the analyzer's worker thread. :class:`JournalError` when the
    file cannot be read as a journal at all (another file, another format: the caller sets it
    aside)."""

    def __init__(self, path: str | Path, checkpoint_frames: int = CHECKPOINT_FRAMES) -> None:
        self.path = Path(path)
        self.checkpoint_frames = max(1, checkpoint_frames)
        self.damage: str | None = None  # the damaged record that ended the replay, if any
        self._replayed: dict[str, Replayed] = {}
        self._written: dict[str, _Written] = {}
        self._encoder = StateEncoder()
        self._fd: int | None = None
        self._size = 0
        self._base = len(HEADER)  # bytes of the last full rewrite
        self.records = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.is_dir():
                raise JournalError(f"analyzer journal {self.path}: is a directory")
            good_end = self._replay() if self.path.exists() else 0
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            if good_end == 0:
                os.ftruncate(self._fd, 0)
                os.write(self._fd, HEADER)
                good_end = len(HEADER)
            self._size = good_end
            if self.damage is None:  # a damaged file stays as found until it is set aside
                os.lseek(self._fd, good_end, os.SEEK_SET)
        except OSError as exc:
            self._close_quietly()
            raise JournalError(f"analyzer journal {self.path}: {exc}") from exc
        except JournalError:
            self._close_quietly()
            raise

    # --- reading ---------------------------------------------------------------------------
    def _replay(self) -> int:
        """Apply every intact record; the offset where the good records end (0: the file is
        empty)."""
        with open(self.path, "rb") as file:
            head = file.read(len(HEADER))
            if not head:
                return 0
            try:
                check_header(head, f"analyzer journal {self.path}")
            except JournalFormatError as exc:
                raise JournalError(str(exc)) from exc
            good_end = len(HEADER)
            try:
                for offset, payload in read_records(file):
                    try:
                        self._apply(unpack(payload))
                    except (ValueError, TypeError, KeyError, IndexError,
                            StateFormatError) as exc:
                        raise DamagedRecord(offset, f"a record cannot be read ({exc})") from exc
                    good_end = file.tell()
                    self.records += 1
            except DamagedRecord as exc:
                self.damage = (f"analyzer journal {self.path}: damaged at offset {exc.offset} "
                               f"of {self.path.stat().st_size} bytes: {exc.why}; the state "
                               f"saved before it ({self.records} record(s)) is restored, "
                               "later saves are lost")
        return good_end

    def _apply(self, rec: dict[str, Any]) -> None:
        kind = rec["k"]
        if kind == "save":
            for device, change in rec["d"].items():
                if change is None:
                    self._replayed.pop(device, None)
                else:
                    self._replayed.setdefault(device, Replayed(device)).apply(change)
            by_device: dict[str, list[tuple[int, int]]] = {}
            for device, seq, capture_ns in rec["s"]:
                by_device.setdefault(device, []).append((seq, capture_ns))
            for device, keys in by_device.items():
                if device in self._replayed:
                    keep_recent(self._replayed[device].stored, keys)
        elif kind == "device":  # one device's full state, as a rewrite writes it
            replayed = self._replayed[rec["device"]] = Replayed(rec["device"])
            replayed.apply(rec["c"])
            keep_recent(replayed.stored, [(s, t) for s, t in rec["s"]])
        else:
            raise ValueError(f"unknown record kind {kind!r}")

    @property
    def empty(self) -> bool:
        """Whether the journal holds no device state (new, or emptied)."""
        return not self._replayed

    def load(self) -> tuple[list[SavedDevice], list[str]]:
        """Every saved device, and a line for each one whose state could not be read (those
        start afresh; their frames' keys are kept)."""
        saved: list[SavedDevice] = []
        problems: list[str] = []
        for device, replayed in self._replayed.items():
            try:
                found = replayed.saved(problems)
            except (StateFormatError, ValueError, TypeError, KeyError) as exc:
                problems.append(f"{device}: {type(exc).__name__}: {exc}")
                continue
            saved.append(found)
            self._written[device] = _Written(
                held={(f.seq, f.capture_ns) for f in found.held},
                stored=deque(replayed.stored), has_detection=found.pipeline is not None,
                since=len(found.frames))
        self._replayed = {}  # handed over: the writer's view takes it from here
        return saved, problems

    # --- writing ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the file."""
        self._close_quietly()

    def _close_quietly(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    @property
    def wants_compaction(self) -> bool:
        """Whether the file has grown enough since the last rewrite to be rewritten."""
        return self._size > max(COMPACT_MIN_BYTES, COMPACT_RATIO * self._base)

    def postpone_compaction(self) -> None:
        """A rewrite failed: try again only once the file has grown as much again."""
        self._base = max(self._base, self._size)

    def restored(self, device: str, analysis: DeviceAnalysis, saved: SavedDevice) -> None:
        """``analysis`` now holds ``saved``, the state the journal holds for ``device``
        (restored into it, and the frames journalled after its checkpoint fed again): the next
        checkpoint writes what changed from that checkpoint (its stores' entries are the very
        objects restored)."""
        written = self._written.get(device)
        if written is None or not written.has_detection:
            return
        written.detection = analysis
        written.mirrors = {path: deque(value) for path, value in saved.parts.items()
                           if is_store(path, value)}
        written.layout = None
        written.since = len(saved.frames)

    def checkpoint_next(self, device: str) -> None:
        """Write ``device``'s detection state whole at its next save (a frame it was fed could
        not be journalled)."""
        written = self._written.get(device)
        if written is not None:
            written.detection = None

    def save(self, devices: Mapping[str, LiveDevice | None],
             stored: Iterable[tuple[str, int, int]], checkpoint: bool = False) -> int:
        """Append one record: what changed in each of ``devices`` (None: forget the device)
        and the keys (device, seq, capture ns) of frames just stored; the bytes written. A
        device's detection state is written (a checkpoint) when its ``checkpoint_frames``-th
        frame since the last one was fed, or with ``checkpoint`` (a clean shutdown); else the
        frames fed since the last save (``LiveDevice.fed``). A device whose state cannot be
        encoded is forgotten (a restart starts it afresh) and named in the JournalError raised
        after the record is written."""
        changes: dict[str, dict[str, Any] | None] = {}
        unsaveable = []
        for device, live in devices.items():
            if live is None:
                changes[device] = None
                self._written.pop(device, None)
                continue
            try:
                changes[device], self._written[device] = self._change(
                    live, self._written.get(device), checkpoint)
            except StateFormatError as exc:  # its older state must not be restored: drop it
                changes[device] = None
                self._written.pop(device, None)
                unsaveable.append(f"{device}: {exc}")
        keys: list[list[Any]] = [[d, seq, ns] for d, seq, ns in stored
                                 if changes.get(d, {}) is not None]
        try:
            payload = self._encoder.pack({"k": "save", "d": changes, "s": keys})
        except StateFormatError:  # a reorder buffer's counts: find whose, save the others
            payload = self._without_unsaveable(changes, keys, unsaveable)
        written = self._append(payload, list(changes))
        for device, seq, capture_ns in keys:
            if device in self._written:
                keep_recent(self._written[device].stored, [(seq, capture_ns)])
        if unsaveable:
            raise UnsaveableState(f"analyzer journal {self.path}: the state of "
                               f"{'; '.join(unsaveable)} cannot be saved; a restart starts "
                               "it afresh")
        return written

    def _without_unsaveable(self, changes: dict[str, dict[str, Any] | None],
                            keys: list[list[Any]], unsaveable: list[str]) -> bytes:
        """The save's payload less the devices whose change cannot be encoded (each named in
        ``unsaveable`` and forgotten, as :meth:`save` says)."""
        for device, change in changes.items():
            try:
                self._encoder.pack(change)
            except StateFormatError as exc:
                changes[device] = None
                self._written.pop(device, None)
                unsaveable.append(f"{device}: {exc}")
        keys[:] = [k for k in keys if changes.get(k[0], {}) is not None]
        return self._encoder.pack({"k": "save", "d": changes, "s": keys})

    def _append(self, payload: bytes, devices: list[str]) -> int:
        data = record(payload)
        if self._fd is None or self.damage is not None:
            for device in devices:  # their changes are lost: written whole next time
                self._written.pop(device, None)
            raise JournalError(f"analyzer journal {self.path}: not open for writing")
        try:
            done = 0
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError as exc:
            # Back to the last whole record; what those devices hold is written whole next
            # time (their mirrors may have moved on).
            for device in devices:
                self._written.pop(device, None)
            try:
                os.ftruncate(self._fd, self._size)
                os.lseek(self._fd, self._size, os.SEEK_SET)
            except OSError:
                self.damage = f"analyzer journal {self.path}: a failed write left a partial record"
            raise JournalError(f"analyzer journal {self.path}: saving failed: {exc}") from exc
        self._size += len(data)
        return len(data)

    def _change(self, live: LiveDevice, written: _Written | None, checkpoint: bool = False
                ) -> tuple[dict[str, Any], _Written]:
        """What changed in one device since ``written`` (None: everything, ``full``), and
        what the journal holds of it once that is written (``written``, updated). The
        detection state is a checkpoint (``det``) when it is new to the journal, when its
        ``checkpoint_frames``-th frame was fed or with ``checkpoint``; otherwise the frames
        fed (``fed``)."""
        # The reorder buffer's counts, encoded with the record (a few integers).
        reorder = dict(vars(live.reorder))
        del reorder["_waiting"]
        change: dict[str, Any] = {"r": reorder, "i": live.implausible, "f": live.fed_end_ns}
        full = written is None
        if written is None:
            written = _Written()
            change["full"] = True
        held = live.reorder.held()
        if held or written.held:
            began = sorted(held.keys() - written.held)
            if began:  # as received (a frame handed in without them is encoded again)
                payloads = live.payloads
                try:
                    change["hold"] = [[seq, ns, payloads.get((seq, ns)) or
                                       encode_frame(held[(seq, ns)])] for seq, ns in began]
                except WireError as exc:
                    raise StateFormatError(f"a held frame cannot be journalled: {exc}") from exc
            ended = written.held - held.keys()
            if ended:
                change["release"] = [list(k) for k in ended]
            written.held = set(held)
        analysis = live.analysis
        if analysis is not None:
            fed = live.fed
            after = written.since + len(fed)  # frames after the checkpoint, these written
            due = (checkpoint and after > 0) or (bool(fed) and after >= self.checkpoint_frames)
            if full or written.detection is not analysis or due:
                change["det"] = self._detection_change(analysis, written)
                written.since = 0
            elif fed:  # bytes already: nothing to encode
                change["fed"] = list(fed)
                written.since += len(fed)
        elif live.pending is not None:
            if full:  # a rewrite: the restored state, not yet in use, whole
                change["det"] = self._pending_detection(live.pending)
                written.has_detection = change["det"] is not None
                if change["det"] is not None and live.pending.frames:
                    change["fed"] = list(live.pending.frames)  # fed after it, not yet again
                    written.since = len(live.pending.frames)
        elif written.has_detection or full:
            change["det"] = None
            written.has_detection = False
            written.detection = None
        return change, written

    def _detection_change(self, analysis: DeviceAnalysis, written: _Written) -> dict[str, Any]:
        """The parts of ``analysis`` as they changed since ``written``: the values (every
        part but the stores: the pipeline's change at nearly every frame, so not compared)
        and each store's dropped count and added entries."""
        pack, rows = self._encoder.pack, self._encoder.encode_rows
        whole = written.detection is not analysis
        if whole:
            written.detection, written.mirrors, written.layout = analysis, {}, None
            written.has_detection = True
        mirrors = written.mirrors
        found = None if written.layout is None else written.layout.read()
        if found is None:  # a new analysis, or its objects changed shape
            written.layout = PartsLayout(analysis)
            found = written.layout.read()
            assert found is not None
            stale = mirrors.keys() - {path for path, _ in found[2]}
            for path in stale:  # no longer a store: written with the values
                del mirrors[path]
        pipeline, assessor, stores = found
        out: dict[str, list[Any]] = {VALUES: ["V", pipeline, assessor]}
        for path, store in stores:
            mirror = mirrors.get(path)
            diff = None if mirror is None else _store_change(mirror, store)
            if diff is None:
                mirrors[path] = deque(store)
                out[path] = ["s", rows(list(store))]
            elif diff[1]:
                added = diff[1]
                out[path] = ["d", diff[0], added if len(added) < ROWS_FROM else rows(added)]
            elif diff[0]:
                out[path] = ["d", diff[0], []]
        # A device's parts in bytes of their own: a part this code cannot rebuild when the
        # file is read loses that device's detection state, not the record.
        change: dict[str, Any] = {"p": pack(out)}
        if whole:
            change["ctx"], change["full"] = detection_context(analysis), True
        return change

    def _pending_detection(self, saved: SavedDevice) -> dict[str, Any] | None:
        if saved.pipeline is None:
            return None
        pack, rows = self._encoder.pack, self._encoder.encode_rows
        parts = saved.parts
        out: dict[str, list[Any]] = {path: ["s", rows(list(v))]
                                     for path, v in parts.items() if is_store(path, v)}
        out[VALUES] = ["V", saved.pipeline, {path: v for path, v in parts.items()
                                             if path.startswith(ASSESSOR)
                                             and not is_store(path, v)}]
        return {"p": pack(out), "ctx": saved.context, "full": True}

    def compact(self, devices: Mapping[str, LiveDevice]) -> int:
        """Rewrite the journal as one full record per device of ``devices`` (every device it
        holds), written aside and renamed over it; the new file's size. The old file stays
        whole if this fails (JournalError)."""
        aside = self.path.with_name(self.path.name + ".rewrite")
        saved_written, self._written = self._written, {}
        fd = None
        try:
            fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            chunks = [HEADER]
            size = len(HEADER)
            for device, live in devices.items():
                stored = saved_written.get(device, _Written()).stored
                change, written = self._change(live, None)
                written.stored = deque(stored)
                self._written[device] = written
                chunk = record(self._encoder.pack({"k": "device", "device": device,
                                                   "c": change,
                                                   "s": [list(k) for k in stored]}))
                chunks.append(chunk)
                size += len(chunk)
                if sum(len(c) for c in chunks) > 8 * 1024 * 1024:
                    os.write(fd, b"".join(chunks))
                    chunks = []
            os.write(fd, b"".join(chunks))
            os.fsync(fd)
            os.close(fd)
            fd = None
            os.replace(aside, self.path)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:  # the rename itself survives a power cut: appends go to the new file
                os.fsync(directory)
            finally:
                os.close(directory)
            self._close_quietly()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except (OSError, StateFormatError) as exc:
            self._written = saved_written
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
            with contextlib.suppress(OSError):
                aside.unlink()
            raise JournalError(f"analyzer journal {self.path}: rewriting failed: {exc}") from exc
        self._size = self._base = size
        self.damage = None
        return size
