"""Sign-in attempts slowed per (account, address) and per address (pure: the time is passed in).

Issue 33: a hard per-account lockout let anyone lock an officer out. Now the failures are
counted per (account, address) and per address: the first ``free`` failures cost nothing,
after that each attempt must wait a delay that doubles with every further failure, capped at
``max_delay_s``; failures older than ``window_s`` are forgotten. The right password from
another address is never held back by someone else's failures. While a delay runs the
password is not checked (so guessing stops even when the guess is right).

Held in the server's memory (one uvicorn process). ``barkwatch review unlock-user NAME``
reaches a running server through the case file's audit log: :meth:`unlock` is called with
the time of the newest unlock entry, and clears the account's failures recorded before it.
Refusals past a limit are summarised per address and window (:meth:`refused` and
:meth:`closed_windows`), so a flood adds two audit rows per window (its first refusal, and
the count of the rest when the window closes or the server stops), not one per attempt.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class RefusalWindow:
    """Refused sign-ins from one address in one window; the first was audited as it came."""

    address: str
    start_s: float
    count: int

    @property
    def unrecorded(self) -> int:
        """The refusals no audit row of their own carries."""
        return self.count - 1


@dataclass
class _Failures:
    count: int
    first_s: float
    last_s: float


class LoginLimiter:
    """Progressive sign-in delays; times in seconds."""

    def __init__(self, max_failures_per_account: int, max_failures_per_address: int,
                 window_s: float, delay_s: float = 1.0, max_delay_s: float = 300.0) -> None:
        self.free_pair = max_failures_per_account
        self.free_address = max_failures_per_address
        self.window_s = window_s
        self.delay_s = delay_s
        self.max_delay_s = max_delay_s
        self._pairs: dict[tuple[str, str], _Failures] = {}
        self._addresses: dict[str, _Failures] = {}
        self._refusals: dict[str, RefusalWindow] = {}  # address -> its open window
        self._closed: list[RefusalWindow] = []  # ended, not yet taken by closed_windows
        self._lock = threading.Lock()  # handlers run in the server's thread pool

    def _wait_s(self, failures: _Failures | None, free: int, now_s: float) -> float:
        """Seconds still to wait (0: may try now)."""
        if failures is None or now_s - failures.last_s >= self.window_s or failures.count < free:
            return 0.0
        delay = min(self.delay_s * 2.0 ** (failures.count - free), self.max_delay_s)
        return max(0.0, failures.last_s + delay - now_s)

    def refusal(self, username: str, address: str, now_s: float) -> str | None:
        """Why an attempt now must wait, or None when it may go ahead."""
        with self._lock:
            pair = self._wait_s(self._pairs.get((username, address)), self.free_pair, now_s)
            if pair > 0:
                return (f"too many failed sign-ins for this account from this address: try "
                        f"again in {pair:.0f} s (an administrator can clear this with "
                        f"barkwatch review unlock-user {username})")
            wait = self._wait_s(self._addresses.get(address), self.free_address, now_s)
            if wait > 0:
                return f"too many failed sign-ins from this address: try again in {wait:.0f} s"
        return None

    def failed(self, username: str, address: str, now_s: float) -> None:
        """Count a failed attempt."""
        with self._lock:
            self._pairs[(username, address)] = self._count(
                self._pairs.get((username, address)), now_s)
            self._addresses[address] = self._count(self._addresses.get(address), now_s)

    def _count(self, old: _Failures | None, now_s: float) -> _Failures:
        if old is None or now_s - old.last_s >= self.window_s:
            return _Failures(1, now_s, now_s)
        old.count += 1
        old.last_s = now_s
        return old

    def succeeded(self, username: str, address: str = "") -> None:
        """A correct password clears the account's failures from that address (and, with no
        address given, from every address)."""
        with self._lock:
            for key in [k for k in self._pairs if k[0] == username and address in ("", k[1])]:
                del self._pairs[key]

    def unlock(self, username: str, unlocked_s: float) -> bool:
        """Clear the account's failures recorded before ``unlocked_s`` (an administrator's
        unlock); True when any were cleared."""
        with self._lock:
            keys = [k for k, f in self._pairs.items()
                    if k[0] == username and f.first_s <= unlocked_s]
            for key in keys:
                del self._pairs[key]
            return bool(keys)

    def refused(self, address: str, now_s: float) -> bool:
        """Count a refusal from ``address``; True when it opens the address's window (the one
        refusal of the window audited as it happens; :meth:`closed_windows` gives the rest)."""
        with self._lock:
            window = self._refusals.get(address)
            if window is None or now_s - window.start_s >= self.window_s:
                if window is not None and window.count > 1:
                    self._closed.append(window)  # a window no sweep has taken yet
                self._refusals[address] = RefusalWindow(address, now_s, 1)
                return True
            window.count += 1
            return False

    def closed_windows(self, now_s: float, everything: bool = False) -> list[RefusalWindow]:
        """The windows of refusals that have ended by ``now_s`` (all of them with
        ``everything``, at shutdown) and held refusals no audit row carries yet, each once:
        the caller audits them (issue 33: the count used to wait for the address's next
        refusal, which may never come, and a restart lost it)."""
        with self._lock:
            ended = [w for w in self._refusals.values()
                     if everything or now_s - w.start_s >= self.window_s]
            for window in ended:
                del self._refusals[window.address]
            closed, self._closed = self._closed + ended, []
        return [w for w in closed if w.count > 1]
