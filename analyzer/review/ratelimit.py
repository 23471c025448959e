"""Sign-in attempts limited per account and per client address (pure: the time is passed in).

Failed attempts are counted over a sliding window; while an account or an address has used up
its failures, every attempt is refused without checking the password (so guessing stops
even when the guess is right). Held in memory: one server process (uvicorn, one worker).
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque


class LoginLimiter:
    """Failures per account and per address within ``window_s`` seconds."""

    def __init__(self, max_failures_per_account: int, max_failures_per_address: int,
                 window_s: float) -> None:
        self.max_account = max_failures_per_account
        self.max_address = max_failures_per_address
        self.window_s = window_s
        self._accounts: defaultdict[str, deque[float]] = defaultdict(deque)
        self._addresses: defaultdict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()  # handlers run in the server's thread pool

    def _recent(self, table: defaultdict[str, deque[float]], key: str, now_s: float) -> int:
        times = table[key]
        while times and times[0] <= now_s - self.window_s:
            times.popleft()
        if not times:
            del table[key]
            return 0
        return len(times)

    def refusal(self, username: str, address: str, now_s: float) -> str | None:
        """Why an attempt now must be refused, or None when it may go ahead."""
        minutes = f"{self.window_s / 60:g} min"
        with self._lock:
            if self._recent(self._accounts, username, now_s) >= self.max_account:
                return (f"too many failed sign-ins for this account: wait {minutes} or ask an "
                        "administrator")
            if self._recent(self._addresses, address, now_s) >= self.max_address:
                return f"too many failed sign-ins from this address: wait {minutes}"
        return None

    def failed(self, username: str, address: str, now_s: float) -> None:
        """Count a failed attempt."""
        with self._lock:
            self._accounts[username].append(now_s)
            self._addresses[address].append(now_s)

    def succeeded(self, username: str) -> None:
        """A correct password clears the account's failures (not the address's)."""
        with self._lock:
            self._accounts.pop(username, None)
