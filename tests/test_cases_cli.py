"""``barkwatch case`` and ``barkwatch report`` on the command line (no services needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.cases import CaseFile
from analyzer.cli.main import main

ACTIONS = ("address", "addresses", "place", "remove", "open", "list", "show", "contact", "observe",
           "exception", "attest", "dispose", "link", "audit", "export")


@pytest.mark.parametrize("action", ACTIONS)
def test_every_case_action_has_help(action: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["case", action, "--help"])
    assert exit_.value.code == 0
    assert "usage: barkwatch case " + action in capsys.readouterr().out


def opened(db: Path) -> list[str]:
    common = ["--db", str(db), "--officer", "Ofc. Lund"]
    assert main(["case", "address", "12 Elm St", *common]) == 0
    assert main(["case", "place", "1", "--device", "glencoe-0001", "--from", "2026-05-30 10:00",
                 *common]) == 0
    assert main(["case", "open", "--address", "1", "--complainant", "Ann Neighbour",
                 "--contact", "555-0101", "--received", "2026-06-01 21:10", "--from",
                 "2026-06-01 21:00", "--to", "2026-06-01 21:30", "--contemporaneous",
                 *common]) == 0
    return common


def test_each_command_that_changes_the_file_appends_to_the_audit_log(tmp_path: Path) -> None:
    db = tmp_path / "cases.sqlite"
    common = opened(db)
    for action, *extra in (("contact", "--method", "door", "--outcome", "ignored"),
                           ("observe", "--note", "continuous barking from the yard"),
                           ("exception", "--kind", "injury", "--note", "limping"),
                           ("attest", "--condition", "5"),
                           ("dispose", "--kind", "warning")):
        assert main(["case", action, "1", *extra, *common]) == 0
    with CaseFile(db) as store:
        actions = [e.action for e in store.audit()]
    assert actions == ["add address", "place device", "open complaint", "record contact attempt",
                       "record observation", "record exception", "attest condition 5",
                       "record disposition"]


def test_the_received_time_is_read_as_chicago_local_time(tmp_path: Path) -> None:
    db = tmp_path / "cases.sqlite"
    opened(db)
    with CaseFile(db) as store:
        complaint = store.complaint(1)
    assert complaint.received_ns == 1_780_366_200 * 1_000_000_000  # 2026-06-02 02:10 UTC


def test_a_time_that_is_not_iso_8601_is_refused_naming_the_option(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    opened(tmp_path / "cases.sqlite")
    with pytest.raises(SystemExit) as exit_:
        main(["case", "observe", "1", "--at", "yesterday", "--note", "x", "--officer", "O",
              "--db", str(tmp_path / "cases.sqlite")])
    assert exit_.value.code == 2
    assert "argument --at: time: 'yesterday' is not an ISO 8601 time" in capsys.readouterr().err


def test_an_unknown_complaint_exits_1_naming_it(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    opened(tmp_path / "cases.sqlite")
    assert main(["case", "observe", "9", "--note", "x", "--officer", "O", "--db",
                 str(tmp_path / "cases.sqlite")]) == 1
    assert "barkwatch: error: no complaint 9" in capsys.readouterr().err


def test_show_without_influxdb_says_the_links_were_not_checked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "cases.sqlite"
    opened(db)
    with CaseFile(db) as store:
        store.add_link(1, "glencoe-0001", "continuous", 1_780_365_600 * 10**9,
                       1_780_366_100 * 10**9, "a" * 64, "Ofc. Lund")
    assert main(["case", "show", "1", "--db", str(db), "--influx-url",
                 "http://127.0.0.1:9"]) == 0
    out = capsys.readouterr().out
    assert "digest " + "a" * 64 + ": NOT CHECKED" in out
    assert "is unreachable" in out
    assert "[ ] 2. supported by a finding" in out


def test_remove_ends_a_placement_once_and_audits_it(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "cases.sqlite"
    common = opened(db)
    assert main(["case", "remove", "1", "--at", "2026-06-03 09:00", *common]) == 0
    assert "placement #1: removed at 2026-06-03 09:00" in capsys.readouterr().out
    with CaseFile(db) as store:
        placement = store.placements(1)[0]
        assert placement.removed_ns == 1780495200 * 10**9  # 14:00 UTC (CDT, UTC-5)
        entry = store.audit()[-1]
        assert (entry.action, entry.entity, entry.entity_id) == ("remove device",
                                                                 "placements", 1)
    assert main(["case", "remove", "1", "--at", "2026-06-04 09:00", *common]) == 1
    assert "placement 1 (glencoe-0001) already ended at 2026-06-03 09:00" in \
        capsys.readouterr().err
    assert main(["case", "addresses", "--db", str(db)]) == 0
    assert "glencoe-0001 (placement #1, removed)" in capsys.readouterr().out
