"""Mosquitto 2.0 password files: ``user:$7$iterations$salt$hash`` lines, PBKDF2-SHA512.

Written here rather than with ``mosquitto_passwd`` because its batch mode takes the password
on the command line, where every user of the machine can read it in the process list. The
format is the one ``mosquitto_passwd`` writes (type 7, 12-byte salt, 64-byte hash, base64);
``tests/test_provision.py`` checks a hash it wrote and the real broker checks ours.

Passwords are 256-bit random tokens (:func:`new_password`), so the iteration count adds
nothing to their strength; Mosquitto's default of 101 keeps every connect cheap.

Rewrites are atomic (temporary file, then rename), keep the file's owner and mode, and hold
an exclusive lock on ``<file>.lock`` so two provisioning commands cannot lose each other's
change. Mosquitto re-reads the file on SIGHUP.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from analyzer.errors import ProvisioningError
from analyzer.files import write_file

HASH_TYPE = "7"  # Mosquitto's PBKDF2-SHA512
ITERATIONS = 101  # Mosquitto 2.0's default
SALT_BYTES = 12


def new_password() -> str:
    """A random password: 32 bytes (256 bits) from the OS's CSPRNG, URL-safe base64."""
    return secrets.token_urlsafe(32)


def hash_password(password: str, salt: bytes | None = None, iterations: int = ITERATIONS) -> str:
    """The ``$7$...`` hash Mosquitto 2.0 checks ``password`` against."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    encoded_salt = base64.b64encode(salt).decode()
    return f"${HASH_TYPE}${iterations}${encoded_salt}${base64.b64encode(digest).decode()}"


def check_password(password: str, hashed: str) -> bool:
    """Whether ``password`` matches a ``$7$`` hash (constant-time comparison)."""
    parts = hashed.split("$")
    if len(parts) != 5 or parts[1] != HASH_TYPE or not parts[2].isdigit():
        raise ProvisioningError(f"unsupported password hash format {hashed[:8]!r}...")
    salt, expected = base64.b64decode(parts[3]), base64.b64decode(parts[4])
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, int(parts[2]))
    return hmac.compare_digest(digest, expected)


class PasswordFile:
    """The users and hashes of one Mosquitto password file, edited under a lock.

    Use as a context manager: entering locks and reads the file (missing = empty), leaving
    without an exception writes it back if anything changed. ``owner`` and ``mode`` apply
    only when the file is created; an existing file keeps its own.
    """

    def __init__(self, path: Path, owner: str | None = None, mode: int = 0o600) -> None:
        self.path = path
        self.owner = owner
        self.mode = mode
        self._entries: dict[str, str] = {}
        self._changed = False
        self._lock: contextlib.ExitStack | None = None

    def __enter__(self) -> PasswordFile:
        self._lock = contextlib.ExitStack()
        self._lock.enter_context(_locked(self.path.with_name(self.path.name + ".lock")))
        self._entries = read_password_file(self.path)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if exc_type is None and self._changed:
                self._save()
        finally:
            if self._lock is not None:
                self._lock.close()

    def users(self) -> list[str]:
        """User names in file order."""
        return list(self._entries)

    def __contains__(self, user: str) -> bool:
        return user in self._entries

    def hash_of(self, user: str) -> str:
        """The stored hash of ``user``; KeyError when absent."""
        return self._entries[user]

    def set_password(self, user: str, password: str) -> None:
        """Add ``user`` or replace its password."""
        if not user or ":" in user or "\n" in user:
            raise ProvisioningError(f"user name {user!r} cannot go into a password file")
        self._entries[user] = hash_password(password)
        self._changed = True

    def remove(self, user: str) -> None:
        """Remove ``user``; ProvisioningError when absent."""
        if user not in self._entries:
            raise ProvisioningError(f"there is no user {user!r} in {self.path}")
        del self._entries[user]
        self._changed = True

    def _save(self) -> None:
        data = "".join(f"{user}:{hashed}\n" for user, hashed in self._entries.items()).encode()
        if self.path.exists():
            status = self.path.stat()
            write_file(self.path, data, status.st_mode & 0o777, (status.st_uid, status.st_gid))
        else:
            write_file(self.path, data, self.mode, self.owner)


def read_password_file(path: Path) -> dict[str, str]:
    """``{user: hash}`` from a password file; empty when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ProvisioningError(f"cannot read the password file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ProvisioningError(
            f"the password file {path} is not UTF-8 text: byte offset {exc.start}, {exc.reason}"
        ) from exc
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        user, separator, hashed = line.partition(":")
        if not separator or not hashed:
            raise ProvisioningError(f"{path} line {number} is not 'user:hash'")
        entries[user] = hashed
    return entries


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

