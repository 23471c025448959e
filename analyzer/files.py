"""Files written with their final permission bits from the start, and given to their owner.

Shared by the deployment (keys, passwords) and the evidence report (personal data): a private
file is never readable by others, not even for a moment.
"""

from __future__ import annotations

import logging
import os
import pwd
import tempfile
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
