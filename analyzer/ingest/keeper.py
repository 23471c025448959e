"""The live analyzer's side of the journal: resume every device at start-up, save after each
stored batch, rewrite the file when it has grown, checkpoint every device at a clean shutdown,
and never let a journal stop storage.

Owned by the analyzer's worker thread, beside the per-device states it saves
(``analyzer.ingest.state.DeviceState``); the file and its format are
:mod:`analyzer.ingest.journal`. A journal that cannot be read at all (another file, another
format, a newer Barkwatch's) is set aside and a new one started: every device starts afresh
from the frames the broker still holds (issue 32, 2). One damaged part way (a record cut short
or failing its checksum) gives back the state saved before the damage: the file is set aside
and a new one written from that state (issue 37, 2).

The journal keeps a device's detection state as a checkpoint and the frames fed after it
(format 5): the service hands each frame's wire payload in when the frame passes its checks
(:meth:`JournalKeeper.received`) and says when the pipeline takes it (:meth:`JournalKeeper.fed`),
and the next save writes the payloads of the frames fed since the last one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from analyzer.config import AnalyzerConfig
from analyzer.ingest.device import DeviceAnalysis
from analyzer.ingest.journal import DeviceJournal, JournalError, UnsaveableState, set_aside
from analyzer.ingest.saved import Held, LiveDevice, SavedDevice
from analyzer.ingest.state import AnalyzerCounters, DeviceState, Key, StoredFrames
from sensor.errors import WireError
from sensor.wire import Frame, encode_frame

log = logging.getLogger(__name__)

STORED_FRAMES_PER_DEVICE = 100_000


class JournalKeeper:
    """Saves and resumes the states in ``devices`` (the worker's dict, shared by reference)
    in the journal at ``config.journal_path``; without one it does nothing."""

    def __init__(self, config: AnalyzerConfig, devices: dict[str, DeviceState],
                 counters: AnalyzerCounters, clock: Callable[[], float]) -> None:
        self.config = config
        self._devices = devices
        self.counters = counters
        self._clock = clock
        self.journal: DeviceJournal | None = None
        self.touched: set[str] = set()  # devices whose state changed since the last save
        self._unsaved_keys: list[Key] = []  # stored frames a failed save did not record
        # By device: wire payloads of the frames received and not yet fed (waiting, mostly),
        # and of the frames fed since the last save, in order
        self._payloads: dict[str, dict[Held, bytes]] = {}
        self._fed: dict[str, list[bytes]] = {}

    # --- start-up ----------------------------------------------------------------------------
    def resume_devices(self) -> None:
        """Open the journal (``journal_path``) and restore each saved device's state."""
        if not self.config.journal_path:
            log.warning("no journal_path: a restart will lose each device's detection state "
                        "(the event open at it loses its start; docs/FAULTS.md)")
            return
        path = Path(self.config.journal_path)
        existed = path.exists() or path.is_symlink()
        try:
            self.journal = DeviceJournal(path, self.config.journal_checkpoint_frames)
            empty = self.journal.empty
            saved, problems = self.journal.load()
        except JournalError as exc:
            if self.journal is not None:
                self.journal.close()
            self.journal = self._afresh(path, exc)
            return
        for problem in problems:
            self.counters.journal_errors += 1
            log.error("journal %s: cannot restore %s; that device starts afresh", path, problem)
        for device in saved:
            try:
                self._resume(device)
            except Exception as exc:  # that device starts afresh, the others resume
                self.counters.journal_errors += 1
                self._devices.pop(device.device, None)
                log.error("journal %s: restoring %s raised %s: %s; it starts afresh",
                          path, device.device, type(exc).__name__, exc, exc_info=True)
        damaged = self.journal.damage is not None
        if self.journal.damage is not None:
            self._recover(path, self.journal.damage)
        if saved:
            log.info("resumed the analysis state of %d device(s) from %s",
                     self.counters.devices_resumed, path)
        elif empty and not damaged:
            log.warning("journal %s %s: every device's detection starts afresh", path,
                        "holds no saved state (emptied?)" if existed else "is new")

    def _afresh(self, path: Path, damage: JournalError) -> DeviceJournal | None:
        """A journal that cannot be used must not stop storage (issue 32, 2): set it aside
        (renamed, kept for inspection) and start an empty one; every device starts afresh
        from the frames the broker still holds. Without even that, run without a journal."""
        self.counters.journal_set_aside += 1
        try:
            moved: str = str(set_aside(path))
        except OSError as exc:
            moved = ""
            log.error("%s; it could not be set aside (%s)", damage, exc)
        if moved:
            log.error("%s; set aside as %s (kept for inspection), a new journal is started: "
                      "every device's detection starts afresh from the frames the broker "
                      "still holds", damage, moved)
            try:
                return DeviceJournal(path, self.config.journal_checkpoint_frames)
            except JournalError as exc:
                damage = exc
                log.error("%s", exc)
        self.counters.journal_off = 1
        log.error("running WITHOUT a journal (%s unusable: %s): a restart will lose each "
                  "device's detection state; repair or remove it and restart", path, damage)
        return None

    def _recover(self, path: Path, damage: str) -> None:
        """The journal was damaged part way: keep the damaged file aside, write a new one
        from the state read before the damage (now resumed)."""
        assert self.journal is not None
        self.counters.journal_set_aside += 1
        self.counters.journal_errors += 1
        try:
            moved = set_aside(path)
            self.journal.compact(self._live_devices())
        except (OSError, JournalError) as exc:
            self.journal.close()
            self.journal = None
            self.counters.journal_off = 1
            log.error("%s; it could not be set aside and written again (%s): running WITHOUT "
                      "a journal; repair or remove it and restart", damage, exc)
            return
        log.error("%s; set aside as %s (kept for inspection), a new journal is written from "
                  "that state", damage, moved)

    def _resume(self, saved: SavedDevice) -> None:
        now = self._clock()
        reorder = saved.reorder
        reorder.window, reorder.max_wait_s = (self.config.reorder_window_frames,
                                              self.config.reorder_wait_s)
        reorder.restamp(now)
        reorder.hold_again(saved.held, now)
        state = DeviceState(reorder, StoredFrames(STORED_FRAMES_PER_DEVICE), now,
                            implausible=saved.implausible, fed_end_ns=saved.fed_end_ns)
        for key in saved.stored:
            state.stored.add(key)
        self._devices[saved.device] = state
        if saved.payloads:
            self._payloads[saved.device] = dict(saved.payloads)
        if saved.fed_end_ns is not None:
            # Restored when the device is next needed (a frame, a released gap, forgetting
            # it), not here: priming reads InfluxDB (three queries a device), and 10,511
            # devices primed at start-up kept storage stopped for 34 s (issue 32, item 7).
            state.resume = saved
        self.counters.devices_resumed += 1

    def restore(self, device: str, saved: SavedDevice, analysis: DeviceAnalysis) -> None:
        """Put ``saved`` into the device's new ``analysis`` (its first use after a restart:
        its checkpoint, then the frames journalled after it fed again), or log why its
        detection starts afresh."""
        if not saved.restore_into(analysis):
            log.warning("%s: %s; detection starts afresh", device, saved.refusal)
            return
        if self.journal is not None:
            self.journal.restored(device, analysis, saved)

    # --- frames ------------------------------------------------------------------------------
    def received(self, device: str, frame: Frame, payload: bytes) -> None:
        """``frame`` (wire bytes ``payload``) passed every check and goes to the reorder
        buffer: kept until the pipeline takes it (:meth:`fed`) or it is pruned at a save."""
        if self.journal is not None:
            self._payloads.setdefault(device, {})[(frame.seq, frame.capture_ns)] = payload

    def fed(self, device: str, frame: Frame) -> None:
        """The pipeline takes ``frame`` now: its payload goes with the next save."""
        if self.journal is None:
            return
        payload = self._payloads.get(device, {}).pop((frame.seq, frame.capture_ns), None)
        if payload is None:  # not received through the service (none so far): encoded again
            try:
                payload = encode_frame(frame)
            except WireError:  # the state itself goes with the next save instead
                self.journal.checkpoint_next(device)
                return
        self._fed.setdefault(device, []).append(payload)

    # --- saving ------------------------------------------------------------------------------
    def _live(self, state: DeviceState, device: str, fed: list[bytes] | None = None
              ) -> LiveDevice:
        payloads = self._payloads.get(device)
        if payloads is not None and len(payloads) > state.reorder.waiting:
            # Frames that were never fed (late ones): only the waiting frames' are kept.
            waiting = state.reorder.held()
            payloads = self._payloads[device] = {k: v for k, v in payloads.items()
                                                 if k in waiting}
        return LiveDevice(state.reorder, state.implausible, state.fed_end_ns, state.analysis,
                          state.resume, fed or [], payloads or {})

    def _live_devices(self) -> dict[str, LiveDevice]:
        return {device: self._live(state, device) for device, state in self._devices.items()}

    def save(self, stored: list[Key]) -> None:
        """Save what changed in every device touched since the last save, and the keys of the
        frames just stored (after they were written, before they are acknowledged)."""
        if self.journal is None or not (self.touched or stored):
            return
        devices: dict[str, LiveDevice | None] = {}
        for device in self.touched:
            state = self._devices.get(device)
            if state is None:
                self._payloads.pop(device, None)
                self._fed.pop(device, None)
                devices[device] = None
            else:
                devices[device] = self._live(state, device, self._fed.pop(device, None))
        # A failed save below loses these frames' payloads: the journal writes the devices'
        # state whole at their next save (journal.py), so none is needed again.
        try:
            self.journal.save(devices, self._unsaved_keys + stored)
        except UnsaveableState as exc:  # written, less the devices it names
            self.counters.journal_errors += 1
            log.error("%s", exc)
        except JournalError as exc:
            # Acknowledged all the same (the frames are stored); saved again with the next
            # batch. A restart before that restores these devices' previous state.
            self.counters.journal_errors += 1
            self._unsaved_keys = (self._unsaved_keys + stored)[-STORED_FRAMES_PER_DEVICE:]
            log.error("%s; retried with the next batch", exc)
            if self.journal.damage is not None:  # a partial record it could not cut off
                self._compact()  # the whole state, written anew, or retried next batch
            return
        self._unsaved_keys = []
        self.touched.clear()
        if self.journal.wants_compaction:
            self._compact()

    def _compact(self) -> None:
        assert self.journal is not None
        try:
            size = self.journal.compact(self._live_devices())
        except JournalError as exc:  # the old file is whole: appended to as before
            self.counters.journal_errors += 1
            self.journal.postpone_compaction()
            log.error("%s; the journal goes on growing until it can be rewritten", exc)
            return
        log.info("journal %s rewritten: %d device(s), %.1f MB", self.journal.path,
                 len(self._devices), size / 1e6)

    def close(self) -> None:
        """Checkpoint every device saved as it is now, then close the file (the worker is
        ending): a clean restart feeds no frame again. A device changed since the last save
        (its batch not stored) keeps what the journal holds: a checkpoint of its state would
        hold frames that the broker delivers again."""
        if self.journal is None:
            return
        devices: dict[str, LiveDevice | None] = {
            device: self._live(state, device) for device, state in self._devices.items()
            if device not in self.touched and state.analysis is not None}
        try:
            if devices:
                self.journal.save(devices, [], checkpoint=True)
        except JournalError as exc:  # what the journal holds is restored, frames fed again
            self.counters.journal_errors += 1
            log.error("%s; a restart feeds the frames since each checkpoint again", exc)
        self.journal.close()
