"""The case file: migrations, private file mode, records, and the append-only audit log."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest

from analyzer.cases import SCHEMA_VERSION, CaseError, CaseFile, CaseStore, migrate
from analyzer.cases.localtime import TimeInputError, format_time, parse_local_time
from analyzer.cases.schema import CaseSchemaError, schema_version

NS = 1_000_000_000
T0 = parse_local_time("2026-06-01 21:00")  # CDT, UTC-5


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        self.now += NS
        return self.now


def tables(connection: sqlite3.Connection) -> list[tuple[str, str]]:
    return sorted(connection.execute(
        "SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall())


def a_case(store: CaseStore) -> int:
    address = store.add_address("12 Elm St", "Ofc. Lund", owner_name="R. Owner")
    store.place_device(address, "glencoe-0001", T0 - 3600 * NS, "Ofc. Lund")
    return store.open_complaint(address, "Ann Neighbour", "555-0101", T0 + 600 * NS, T0,
                                T0 + 1200 * NS, True, "Ofc. Lund")


def test_times_are_read_as_chicago_local_and_printed_with_utc() -> None:
    assert parse_local_time("2026-06-02T02:00:00Z") == T0
    assert format_time(T0) == "2026-06-01 21:00:00 CDT (2026-06-02 02:00:00 UTC)"
    assert format_time(parse_local_time("2026-01-15 08:30")) == \
        "2026-01-15 08:30:00 CST (2026-01-15 14:30:00 UTC)"


def test_a_local_time_that_daylight_saving_repeats_is_refused() -> None:
    with pytest.raises(TimeInputError, match="ambiguous or does not exist"):
        parse_local_time("2026-11-01 01:30")  # clocks go back at 02:00 CDT


def test_a_new_case_file_is_readable_by_its_owner_only_and_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "cases.sqlite"
    with CaseFile(path, Clock()) as store:
        a_case(store)
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("start_version", range(SCHEMA_VERSION))
def test_migrating_from_each_version_gives_the_schema_of_a_new_file(
        tmp_path: Path, start_version: int) -> None:
    fresh = sqlite3.connect(tmp_path / "fresh.sqlite")
    assert migrate(fresh) == SCHEMA_VERSION
    old = sqlite3.connect(tmp_path / "old.sqlite")
    migrate(old, start_version)
    assert schema_version(old) == start_version
    if start_version >= 1:  # the records of an older file survive the migration
        old.execute("INSERT INTO addresses (premises, created_ns) VALUES ('12 Elm St', 1)")
        old.commit()
    assert migrate(old) == SCHEMA_VERSION
    assert tables(old) == tables(fresh)
    if start_version >= 1:
        assert old.execute("SELECT premises FROM addresses").fetchall() == [("12 Elm St",)]


def test_a_file_from_newer_software_is_refused(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "new.sqlite")
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(CaseSchemaError, match="upgrade Barkwatch"):
        migrate(connection)


def test_every_change_appends_one_audit_entry_naming_who_what_and_when(tmp_path: Path) -> None:
    clock = Clock()
    with CaseFile(tmp_path / "cases.sqlite", clock) as store:
        complaint = a_case(store)
        store.add_contact_attempt(complaint, T0, "phone", "no_answer", "Ofc. Lund")
        store.add_observation(complaint, T0, "Ofc. Lund", "barking from the back yard")
        store.add_exception(complaint, "trespass", T0, "Ofc. Lund", "kids in the yard")
        store.add_attestation(complaint, 5, T0, "Ofc. Lund")
        store.add_disposition(complaint, "warning", T0, "Ofc. Lund")
        store.add_link(complaint, "glencoe-0001", "continuous", T0, T0 + 500 * NS, "a" * 64,
                       "Ofc. Lund")
        entries = store.audit()
    assert [(e.action, e.entity) for e in entries] == [
        ("add address", "addresses"), ("place device", "placements"),
        ("open complaint", "complaints"), ("record contact attempt", "contact_attempts"),
        ("record observation", "observations"), ("record exception", "exceptions"),
        ("attest condition 5", "attestations"), ("record disposition", "dispositions"),
        ("link evidence window", "evidence_links")]
    assert {e.actor for e in entries} == {"Ofc. Lund"}
    assert [e.at_ns for e in entries] == sorted(e.at_ns for e in entries)
    assert '"kind": "trespass"' in entries[5].detail


def test_the_audit_log_refuses_update_and_delete(tmp_path: Path) -> None:
    with CaseFile(tmp_path / "cases.sqlite", Clock()) as store:
        a_case(store)
        for statement in ("UPDATE audit_log SET actor = 'someone else'", "DELETE FROM audit_log"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                store.db.execute(statement)
        assert len(store.audit()) == 3


def test_a_refused_record_leaves_no_audit_entry(tmp_path: Path) -> None:
    with CaseFile(tmp_path / "cases.sqlite", Clock()) as store:
        complaint = a_case(store)
        with pytest.raises(CaseError, match="outcome 'gone fishing' is not one of"):
            store.add_contact_attempt(complaint, T0, "phone", "gone fishing", "Ofc. Lund")
        with pytest.raises(CaseError, match="address #1 is .12 Elm St. already"):
            store.add_address("12 Elm St", "Ofc. Lund")
        assert len(store.audit()) == 3


def test_a_citation_counts_the_citations_at_the_address_before_it(tmp_path: Path) -> None:
    clock = Clock()
    clock.now = T0 + 86400 * NS  # records are dated at most a day after the clock
    with CaseFile(tmp_path / "cases.sqlite", clock) as store:
        first = a_case(store)
        second = store.open_complaint(1, "Bo Next", "555-0102", T0 + 86400 * NS,
                                      T0 + 86000 * NS, T0 + 87000 * NS, True, "Ofc. Lund")
        store.add_disposition(first, "citation", T0 + 3600 * NS, "Ofc. Lund")
        store.add_disposition(second, "citation", T0 + 90000 * NS, "Ofc. Lund")
        assert [d.prior_citations for d in store.dispositions(first)] == [0]
        assert [d.prior_citations for d in store.dispositions(second)] == [1]


def test_a_complaint_at_an_unknown_address_is_refused_by_number(tmp_path: Path) -> None:
    with CaseFile(tmp_path / "cases.sqlite", Clock()) as store, \
            pytest.raises(CaseError, match="no address 7"):
        store.open_complaint(7, "Ann", "555", T0, T0, T0 + NS, True, "Ofc. Lund")
