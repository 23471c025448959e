"""Files written with their final permission bits from the start, and given to their owner.

Shared by the deployment (keys, passwords) and the evidence report (personal data): a private
file is never readable by others, not even for a moment.
"""

from __future__ import annotations

import logging
import os
import pwd
import tempfile
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger(__name__)

Owner = str | tuple[int, int]


def write_file(path: Path, data: bytes, mode: int, owner: Owner | None = None) -> None:
    """Write ``data`` to ``path`` atomically with permission bits ``mode`` from the start.

    ``owner``: a user name (its primary group goes with it) or a (uid, gid) pair to give the
    file to; applied only when running as root, ignored otherwise.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(handle, mode)
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        if owner is not None:
            give_to(Path(temporary), owner, shown_as=path)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def give_to(path: Path, owner: Owner, shown_as: Path | None = None) -> None:
    """chown ``path`` to ``owner`` when running as root; a missing user is only warned about.

    ``shown_as``: the name to give in that warning (the final name of a file still being
    written under a temporary one).
    """
    if os.geteuid() != 0:
        return
    if isinstance(owner, tuple):
        os.chown(path, *owner)
        return
    try:
        entry = pwd.getpwnam(owner)
    except KeyError:
        log.warning("user %r does not exist; %s stays owned by root (create the user, then "
                    "chown the file)", owner, shown_as or path)
        return
    os.chown(path, entry.pw_uid, entry.pw_gid)


def owner_of(path: Path) -> str:
    """The user name that owns ``path`` (its uid when the user has no name)."""
    uid = path.stat().st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


SQLITE_SIDE_FILES = ("-wal", "-shm")


def set_sqlite_file_aside(path: Path, label: str, now: datetime | None = None) -> Path:
    """Rename the SQLite database ``path`` and its ``-wal`` and ``-shm`` files to
    ``PATH.<label>-YYYYMMDDTHHMMSSZ`` beside it (``-2``, ``-3``, ... when that name is taken),
    kept for inspection, and return the new name. The side files go with it: left beside a new
    file of the old name, SQLite would replay a stale ``-wal`` into it. Raises OSError when it
    cannot be renamed."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.{label}-{stamp}")
    n = 1
    while target.exists() or target.is_symlink():
        n += 1
        target = path.with_name(f"{path.name}.{label}-{stamp}-{n}")
    os.rename(path, target)
    for suffix in SQLITE_SIDE_FILES:
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.rename(side, target.with_name(target.name + suffix))
    return target
