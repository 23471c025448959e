"""docs/DEPLOY.md's backups, run as written: the case file with ``barkwatch case backup`` and
``restore`` (while another connection writes), and InfluxDB with ``influxd backup -portable``
and ``influxd restore -portable`` into a fresh server. Each restore must lose nothing that the
backup held: every row and audit entry of the case file, every point of every measurement,
and every linked evidence window must still verify."""

from __future__ import annotations

import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from analyzer.cases import CaseError, CaseFile, CaseStore, verify_link
from analyzer.cases.backup import backup_case_file, restore_case_file
from analyzer.deploy.services import LOOPBACK, InfluxDB
from analyzer.store import InfluxClient, InfluxSettings
from tests.review_scene import OFFICER, T0, evening_barks, file_case, store_evidence

BARKWATCH = Path(sys.executable).parent / "barkwatch"
NS = 1_000_000_000
# The document's commands, with the test servers' RPC ports in place of 127.0.0.1:8088.
INFLUX_BACKUP = "influxd backup -portable -db barkwatch -host {host} {folder}"
INFLUX_RESTORE = "influxd restore -portable -db barkwatch -host {host} {folder}"


def _barkwatch(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BARKWATCH, *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def _rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table, in rowid order."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        return {t: db.execute(f'SELECT * FROM "{t}" ORDER BY rowid').fetchall() for t in tables}


def _case_file(path: Path) -> None:
    with CaseFile(path, lambda: T0) as store:
        address = store.add_address("12 Elm St", OFFICER, owner_name="R. Owner")
        store.place_device(address, "glencoe-0007", T0 - 86400 * NS, OFFICER)
        complaint = store.open_complaint(address, "Ann Neighbour", "555-0101", T0, T0 - 600 * NS,
                                         T0, True, OFFICER)
        store.add_observation(complaint, T0, OFFICER, "barking heard from the sidewalk")


def test_a_backup_taken_while_another_connection_writes_holds_what_was_committed(
    tmp_path: Path,
) -> None:
    live = tmp_path / "cases.sqlite"
    _case_file(live)
    writer = CaseFile(live, lambda: T0)  # the review application, say: WAL mode, left open
    try:
        CaseStore(writer).add_observation(1, T0 + NS, OFFICER, "still in the -wal file")
        assert (tmp_path / "cases.sqlite-wal").stat().st_size > 0  # not yet checkpointed
        copy = tmp_path / "backup.sqlite"
        result = _barkwatch("case", "backup", "--db", live, "--officer", OFFICER, copy)
        assert result.returncode == 0, result.stderr
        assert f"backed up {live} to {copy} (mode 0600): " in result.stdout
        assert "observations 2" in result.stdout
        assert stat.S_IMODE(copy.stat().st_mode) == 0o600  # it holds personal data
        assert not (tmp_path / "backup.sqlite-wal").exists()  # one self-contained file
        backed = _rows(copy)
        assert [r[4] for r in backed["observations"]][-1] == "still in the -wal file"
        live_now = _rows(live)
        # The backup is audited in the live file, after the snapshot.
        assert live_now["audit_log"][:len(backed["audit_log"])] == backed["audit_log"]
        assert live_now["audit_log"][-1][3] == "case file backed up"
    finally:
        writer.close()


def test_a_backup_never_overwrites_and_refuses_a_missing_case_file(tmp_path: Path) -> None:
    live, copy = tmp_path / "cases.sqlite", tmp_path / "backup.sqlite"
    refused = _barkwatch("case", "backup", "--db", live, "--officer", OFFICER, copy)
    assert refused.returncode == 1
    assert f"case file {live} does not exist: nothing to back up" in refused.stderr
    assert not live.exists()  # not created by asking for a backup
    _case_file(live)
    copy.write_text("an earlier backup\n")
    with pytest.raises(CaseError, match="exists already: a backup never overwrites"):
        backup_case_file(live, copy)
    assert copy.read_text() == "an earlier backup\n"


def test_a_restore_loses_nothing_from_the_backup_and_keeps_the_file_it_replaced(
    tmp_path: Path,
) -> None:
    live, copy = tmp_path / "cases.sqlite", tmp_path / "backup.sqlite"
    _case_file(live)
    backup_case_file(live, copy)
    backed = _rows(copy)
    with CaseFile(live, lambda: T0 + 60 * NS) as store:  # recorded after the backup
        store.add_observation(1, T0 + 60 * NS, OFFICER, "after the backup")
    after = _rows(live)
    result = _barkwatch("case", "restore", "--db", live, "--officer", "Admin Berg", copy)
    assert result.returncode == 0, result.stderr
    kept = next(tmp_path.glob("cases.sqlite.replaced-*Z"))
    assert f"the file it replaced is kept as {kept}" in result.stdout
    restored = _rows(live)
    for table, rows in backed.items():
        if table == "audit_log":
            assert restored[table][:len(rows)] == rows  # then the restore's own entry
            assert restored[table][-1][2:4] == ("Admin Berg", "case file restored from a "
                                                "backup")
            assert len(restored[table]) == len(rows) + 1
        else:
            assert restored[table] == rows, table
    assert _rows(kept) == after  # what was recorded after the backup is not lost
    assert stat.S_IMODE(live.stat().st_mode) == 0o600


def test_a_damaged_backup_is_refused_and_the_case_file_left_as_it_was(tmp_path: Path) -> None:
    live, damaged = tmp_path / "cases.sqlite", tmp_path / "damaged.sqlite"
    _case_file(live)
    backup_case_file(live, damaged)
    data = bytearray(damaged.read_bytes())
    data[4096:8192] = b"\xff" * 4096  # a page of garbage
    damaged.write_bytes(bytes(data))
    before = _rows(live)
    with pytest.raises(CaseError, match="damaged|not a usable SQLite database"):
        restore_case_file(damaged, live, "Admin Berg")
    assert _rows(live) == before
    assert not list(tmp_path.glob("cases.sqlite.replaced-*"))


@pytest.fixture
def two_influxdbs(tmp_path: Path) -> Iterator[tuple[InfluxDB, InfluxDB]]:
    first, second = InfluxDB(tmp_path / "first"), InfluxDB(tmp_path / "second")
    first.start()
    try:
        second.start()
        try:
            yield first, second
        finally:
            second.stop()
    finally:
        first.stop()


def _everything(client: InfluxClient) -> dict[str, list[list[object]]]:
    measurements = [row[0] for row in client.query("SHOW MEASUREMENTS")[0]["values"]]
    return {m: client.query(f'SELECT * FROM "{m}"')[0]["values"] for m in measurements}


def test_influxdb_restored_from_a_portable_backup_holds_every_point_and_the_windows_verify(
    two_influxdbs: tuple[InfluxDB, InfluxDB], tmp_path: Path,
) -> None:
    source, fresh = two_influxdbs
    client = InfluxClient(InfluxSettings(url=source.url))
    client.create_database()
    windows = store_evidence(client, evening_barks(), 6000)
    assert windows >= 1
    case = file_case(tmp_path / "cases.sqlite", client)
    folder = tmp_path / "influx-backup"
    for command, server in ((INFLUX_BACKUP, source), (INFLUX_RESTORE, fresh)):
        argv = command.format(host=f"{LOOPBACK}:{server.rpc_port}", folder=folder).split()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    restored = InfluxClient(InfluxSettings(url=fresh.url))
    original = _everything(client)
    assert original["level"] and original["dog_event"] and original["evidence_window"]
    assert _everything(restored) == original
    with CaseFile(case.db) as store:
        links = store.links(case.complaint)
    assert len(links) == case.links >= 1
    assert all(verify_link(restored, link).verified for link in links)
