"""Who is signed in: the signed cookie carries a random session id and the form token; the
server keeps the sessions it opened, so signing out (or a restart) ends a session even if a
copy of its cookie survives. Sessions expire after ``idle_s`` unused and ``max_s`` in all.

The CSRF token is random per session (also before sign-in, for the sign-in form) and every
POST must carry it (OWASP's synchronizer-token pattern).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from analyzer.cases import OfficerAccount

NS = 1_000_000_000
CSRF_FIELD = "csrf_token"


@dataclass
class OfficerSession:
    """One signed-in officer."""

    sid: str
    account_id: int
    username: str
    officer: str
    signed_in_ns: int
    last_seen_ns: int
    credential: str  # fingerprint of the password hash at sign-in (see credential_of)
    role: str = "officer"  # the account's role at sign-in (a change ends the session)


def credential_of(account: OfficerAccount) -> str:
    """A fingerprint of the account's password hash: a session opened before the password
    was changed no longer matches it, so each request can tell (issue 33)."""
    return hashlib.sha256(account.password_hash.encode()).hexdigest()


def still_valid(session: OfficerSession, account: OfficerAccount | None) -> bool:
    """True while the session's account exists, is enabled and has the password and the
    role it was opened with."""
    return (account is not None and account.active and account.id == session.account_id
            and account.role == session.role
            and hmac.compare_digest(credential_of(account), session.credential))


class SessionRegistry:
    """The server's open sessions (thread-safe; the request handlers run in a pool)."""

    def __init__(self, idle_s: int, max_s: int, clock: Callable[[], int]) -> None:
        self.idle_ns = idle_s * NS
        self.max_ns = max_s * NS
        self.clock = clock
        self._open: dict[str, OfficerSession] = {}
        self._lock = threading.Lock()

    def open(self, account: OfficerAccount) -> OfficerSession:
        """A new session for ``account`` (a fresh id: no fixation of an earlier one)."""
        now = self.clock()
        session = OfficerSession(secrets.token_urlsafe(32), account.id, account.username,
                                 account.officer, now, now, credential_of(account),
                                 account.role)
        with self._lock:
            self._open[session.sid] = session
        return session

    def find(self, sid: object) -> OfficerSession | None:
        """The live session ``sid`` (touched now), or None if unknown or expired."""
        if not isinstance(sid, str):
            return None
        now = self.clock()
        with self._lock:
            session = self._open.get(sid)
            if session is None:
                return None
            if now - session.last_seen_ns > self.idle_ns or \
                    now - session.signed_in_ns > self.max_ns:
                del self._open[sid]
                return None
            session.last_seen_ns = now
            return session

    def close(self, sid: object) -> OfficerSession | None:
        """End a session; returns it if it was open."""
        with self._lock:
            return self._open.pop(sid, None) if isinstance(sid, str) else None


def csrf_token(cookie: MutableMapping[str, Any]) -> str:
    """The session's form token, created on first use."""
    token = cookie.get(CSRF_FIELD)
    if not isinstance(token, str) or len(token) < 32:
        token = secrets.token_urlsafe(32)
        cookie[CSRF_FIELD] = token
    return token


def csrf_matches(cookie: MutableMapping[str, Any], submitted: object) -> bool:
    """True when the form carried the session's token (compared in constant time)."""
    expected = cookie.get(CSRF_FIELD)
    return (isinstance(expected, str) and isinstance(submitted, str) and bool(submitted)
            and hmac.compare_digest(expected.encode(), submitted.encode()))
