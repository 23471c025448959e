"""The live analyzer's side of the journal: resume every device at start-up, save after each
stored batch, rewrite the file when it has grown, and never let a journal stop storage.

Owned by the analyzer's worker thread, beside the per-device states it saves
(``analyzer.ingest.state.DeviceState``); the file and its format are
:mod:`analyzer.ingest.journal`. A journal that cannot be read at all (another file, another
format, a newer Barkwatch's) is set aside and a new one started: every device starts afresh
from the frames the broker still holds (issue 32, 2). One damaged part way (a record cut short
or failing its checksum) gives back the state saved before the damage: the file is set aside
and a new one written from that state (issue 37, 2).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from analyzer.config import AnalyzerConfig
from analyzer.ingest.device import DeviceAnalysis
from analyzer.ingest.journal import DeviceJournal, JournalError, UnsaveableState, set_aside
from analyzer.ingest.saved import LiveDevice, SavedDevice
from analyzer.ingest.state import AnalyzerCounters, DeviceState, Key, StoredFrames

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
            self.journal = DeviceJournal(path)
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
                return DeviceJournal(path)
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
        if saved.fed_end_ns is not None:
            # Restored when the device is next needed (a frame, a released gap, forgetting
            # it), not here: priming reads InfluxDB (three queries a device), and 10,511
            # devices primed at start-up kept storage stopped for 34 s (issue 32, item 7).
            state.resume = saved
        self.counters.devices_resumed += 1

    def restore(self, device: str, saved: SavedDevice, analysis: DeviceAnalysis) -> None:
        """Put ``saved`` into the device's new ``analysis`` (its first use after a restart),
        or log why its detection starts afresh."""
        if not saved.restore_into(analysis):
            log.warning("%s: %s; detection starts afresh", device, saved.refusal)
            return
        if self.journal is not None:
            self.journal.restored(device, analysis)

    # --- saving ------------------------------------------------------------------------------
    def _live(self, state: DeviceState) -> LiveDevice:
        return LiveDevice(state.reorder, state.implausible, state.fed_end_ns, state.analysis,
                          state.resume)

    def _live_devices(self) -> dict[str, LiveDevice]:
        return {device: self._live(state) for device, state in self._devices.items()}

    def save(self, stored: list[Key]) -> None:
        """Save what changed in every device touched since the last save, and the keys of the
        frames just stored (after they were written, before they are acknowledged)."""
        if self.journal is None or not (self.touched or stored):
            return
        devices = {device: (None if device not in self._devices
                            else self._live(self._devices[device])) for device in self.touched}
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
        """Close the file (the worker is ending)."""
        if self.journal is not None:
            self.journal.close()
