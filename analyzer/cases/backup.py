"""Backing up and restoring the case file (complaints, personal data, the audit log).

A backup is SQLite's online backup of the live file (``sqlite3.Connection.backup``): one
consistent snapshot, taken while the review application and ``barkwatch case`` keep writing
(in WAL mode readers never block writers). A plain ``cp`` of a file in WAL mode can miss what
is still in its ``-wal`` file, or catch a page half written.

A restore never deletes: the case file it replaces is renamed aside, with its ``-wal`` and
``-shm`` files, so nothing already recorded is lost even by a restore of the wrong backup.
The stale ``-wal`` file must not stay beside the restored one: SQLite would replay it into
the restored pages. The restore is written to the audit log of the restored file.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from analyzer.cases.store import CaseError, CaseFile, CaseStore, create_private_file
from analyzer.files import SQLITE_SIDE_FILES, set_sqlite_file_aside

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CaseFileSummary:
    """What a case file holds: rows per table (the audit log among them)."""

    path: Path
    rows: dict[str, int]

    def line(self) -> str:
        """``complaints 3, audit_log 41, ...``: for the console."""
        return ", ".join(f"{table} {count}" for table, count in sorted(self.rows.items()))


def _checked(connection: sqlite3.Connection, path: Path) -> CaseFileSummary:
    """Refuse a damaged file (``PRAGMA integrity_check``); count the rows of every table."""
    try:
        problems = [row[0] for row in connection.execute("PRAGMA integrity_check")]
        tables = [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        rows = {table: int(connection.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
                for table in tables}
    except sqlite3.DatabaseError as exc:
        raise CaseError(f"{path} is not a usable SQLite database: {exc}") from exc
    if problems != ["ok"]:
        raise CaseError(f"{path} is damaged (SQLite integrity check): {'; '.join(problems[:5])}")
    if "audit_log" not in rows:
        raise CaseError(f"{path} is not a Barkwatch case file: it has no audit log")
    return CaseFileSummary(path, rows)


def backup_case_file(source: str | Path, destination: str | Path) -> CaseFileSummary:
    """Copy the case file ``source`` into the new file ``destination`` (created mode 0600,
    never overwritten) as one consistent snapshot, and check the copy. Returns what the copy
    holds."""
    source, destination = Path(source), Path(destination)
    if not source.is_file():
        raise CaseError(f"case file {source} does not exist")
    if destination.exists():
        raise CaseError(f"{destination} exists already: a backup never overwrites a file")
    if not destination.parent.is_dir():
        raise CaseError(f"{destination}: folder {destination.parent} does not exist")
    create_private_file(destination)
    try:
        with closing(sqlite3.connect(source)) as live, \
                closing(sqlite3.connect(destination)) as copy:
            live.backup(copy)
            # A self-contained file: no -wal beside it to lose when it is moved.
            copy.execute("PRAGMA journal_mode = DELETE")
            summary = _checked(copy, destination)
    except (sqlite3.Error, CaseError) as exc:
        destination.unlink(missing_ok=True)
        raise CaseError(f"backup of {source} to {destination} failed: {exc}") from exc
    log.info("backed up %s to %s: %s", source, destination, summary.line())
    return summary


def restore_case_file(backup: str | Path, target: str | Path, officer: str,
                      clock: Callable[[], int] = time.time_ns,
                      ) -> tuple[CaseFileSummary, Path | None]:
    """Put the backup ``backup`` in place of the case file ``target``. The file it replaces
    (if any) is renamed aside with its side files and kept; returns what the restored file
    holds and where the replaced one went. Stop the review application and every other
    writer first: a writer that still has the old file open keeps writing to the renamed one.
    """
    backup, target = Path(backup), Path(target)
    if not backup.is_file():
        raise CaseError(f"backup {backup} does not exist")
    if backup.resolve() == target.resolve():
        raise CaseError(f"{backup} is the case file itself")
    with closing(sqlite3.connect(f"file:{backup}?mode=ro", uri=True)) as connection:
        checked = _checked(connection, backup)
    kept: Path | None = None
    if target.exists():
        kept = set_sqlite_file_aside(target, "replaced",
                                     datetime.fromtimestamp(clock() / 1e9, UTC))
    else:
        for suffix in SQLITE_SIDE_FILES:  # a stale side file alone would be replayed into it
            target.with_name(target.name + suffix).unlink(missing_ok=True)
    staging = target.with_name(f".{target.name}.restoring")
    staging.unlink(missing_ok=True)
    create_private_file(staging)
    with closing(sqlite3.connect(f"file:{backup}?mode=ro", uri=True)) as source, \
            closing(sqlite3.connect(staging)) as copy:
        source.backup(copy)
    os.replace(staging, target)
    with CaseFile(target, clock) as store:
        _audit_restore(store, officer, backup, checked, kept)
    log.warning("case file %s restored from %s%s", target, backup,
                f"; the file it replaced is kept as {kept}" if kept else "")
    with closing(sqlite3.connect(target)) as connection:
        restored = _checked(connection, target)
    return restored, kept


def _audit_restore(store: CaseStore, officer: str, backup: Path, checked: CaseFileSummary,
                   kept: Path | None) -> None:
    store.record_access(officer, "case file restored from a backup", "audit_log", [0],
                        {"backup": str(backup), "backup_rows": checked.rows,
                         "replaced_file_kept_as": str(kept) if kept else None})
