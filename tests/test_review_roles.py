"""Issue 33, roles: an officer records, an administrator manages accounts and records nothing.
Against the real server of tests/test_review_http.py (uvicorn, real InfluxDB, real case file)
and the real ``barkwatch review`` commands."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

from analyzer.cases import (
    ADMINISTRATOR,
    OFFICER,
    CaseError,
    CaseFile,
    add_account,
    find_account,
    migrate,
    set_role,
)
from analyzer.cli.main import main
from analyzer.review import hash_password
from tests.test_review_http import PASSWORD, Browser, Server, server

__all__ = ["server"]  # the module-scoped server fixture, one for this module


def _account(server: Server, username: str, role: str) -> int:
    with CaseFile(server.case.db) as store:
        return add_account(store, username, f"Ofc. {username.title()}",
                           hash_password(PASSWORD), "admin", role)


def _observations(server: Server) -> int:
    with CaseFile(server.case.db) as store:
        return len(store.observations(server.case.complaint))


def test_an_administrator_cannot_record_evidence(server: Server) -> None:
    _account(server, "adm1", ADMINISTRATOR)
    browser = Browser(server.base)
    assert browser.sign_in(PASSWORD, "adm1")[0] == 303
    status, _, body = browser.request(f"/cases/{server.case.complaint}")
    assert status == 200 and 'id="records-by-officers"' in body
    assert 'id="form-observation"' not in body
    before = _observations(server)
    status, _, body = browser.request(f"/cases/{server.case.complaint}/record/observation",
                                      {"csrf_token": browser.token, "note": "by the admin"})
    assert status == 403 and "Only an officer&#39;s account records evidence" in body
    assert _observations(server) == before


def test_an_officer_cannot_open_or_change_the_accounts(server: Server) -> None:
    _account(server, "off1", OFFICER)
    victim = _account(server, "off2", OFFICER)
    browser = Browser(server.base)
    browser.sign_in(PASSWORD, "off1")
    status, _, body = browser.request("/cases")
    assert status == 200 and 'id="nav-accounts"' not in body
    status, _, body = browser.request("/accounts")
    assert status == 403 and "Only an administrator" in body
    status, _, _ = browser.request(f"/accounts/{victim}/disable",
                                   {"csrf_token": browser.token})
    assert status == 403
    with CaseFile(server.case.db) as store:
        account = find_account(store, "off2")
    assert account is not None and account.active


def test_an_administrator_disables_an_officer_in_the_app_and_the_session_ends(
        server: Server) -> None:
    _account(server, "adm2", ADMINISTRATOR)
    officer = _account(server, "off3", OFFICER)
    officer_browser = Browser(server.base)
    officer_browser.sign_in(PASSWORD, "off3")
    assert officer_browser.request("/cases")[0] == 200
    admin = Browser(server.base)
    admin.sign_in(PASSWORD, "adm2")
    status, _, body = admin.request("/accounts")
    assert status == 200 and 'id="account-off3"' in body
    status, location, _ = admin.request(f"/accounts/{officer}/disable",
                                        {"csrf_token": admin.token})
    assert (status, location) == (303, "/accounts")
    assert "Account off3 disabled" in admin.request("/accounts")[2]
    assert officer_browser.request("/cases")[0] == 303  # signed out at the next request
    with CaseFile(server.case.db) as store:
        entry = [e for e in store.audit() if e.action == "disable officer account"][-1]
    assert entry.actor == "Ofc. Adm2" and json.loads(entry.detail) == {"username": "off3"}


def test_an_administrator_cannot_disable_their_own_account_in_the_app(server: Server) -> None:
    me = _account(server, "adm3", ADMINISTRATOR)
    admin = Browser(server.base)
    admin.sign_in(PASSWORD, "adm3")
    admin.request("/accounts")
    admin.request(f"/accounts/{me}/disable", {"csrf_token": admin.token})
    assert "cannot disable their own account" in admin.request("/accounts")[2]
    with CaseFile(server.case.db) as store:
        account = find_account(store, "adm3")
    assert account is not None and account.active


def test_an_administrator_unlocks_a_delayed_officer_in_the_app(server: Server) -> None:
    officer = _account(server, "off4", OFFICER)
    _account(server, "adm4", ADMINISTRATOR)
    locked_out = Browser(server.base)
    for _ in range(4):  # 3 free failures, then a delay
        locked_out.sign_in("wrong password", "off4")
    assert locked_out.sign_in(PASSWORD, "off4")[0] == 429
    admin = Browser(server.base)
    admin.sign_in(PASSWORD, "adm4")
    admin.request("/accounts")
    admin.request(f"/accounts/{officer}/unlock", {"csrf_token": admin.token})
    assert locked_out.sign_in(PASSWORD, "off4")[0] == 303


def test_a_role_change_ends_the_open_sessions(server: Server) -> None:
    _account(server, "off5", OFFICER)
    browser = Browser(server.base)
    browser.sign_in(PASSWORD, "off5")
    assert browser.request("/cases")[0] == 200
    with CaseFile(server.case.db) as store:
        set_role(store, "off5", ADMINISTRATOR, "admin")
    assert browser.request("/cases")[0] == 303
    browser.sign_in(PASSWORD, "off5")
    assert browser.request("/accounts")[0] == 200


def test_roles_from_the_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "review.toml"
    config.write_text(f'cases_db = "{tmp_path / "cases.sqlite"}"\n', encoding="utf-8")
    args = ["--config", str(config), "--by", "admin"]
    monkeypatch.setattr("sys.stdin", io.StringIO("a long enough password\n"))
    assert main(["review", "add-user", "boss", "--officer", "C. Boss", "--role",
                 "administrator", "--password-stdin", *args]) == 0
    assert "account #1: boss (C. Boss), administrator" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("a long enough password\n"))
    assert main(["review", "add-user", "lund", "--officer", "Ofc. Lund", "--password-stdin",
                 *args]) == 0
    assert main(["review", "set-role", "lund", "administrator", *args]) == 0
    assert main(["review", "set-role", "boss", "officer", *args]) == 0
    capsys.readouterr()
    assert main(["review", "users", *args]) == 0
    assert capsys.readouterr().out.splitlines() == ["boss  C. Boss  officer  active",
                                                    "lund  Ofc. Lund  administrator  active"]
    assert main(["review", "set-role", "lund", "chief", *args]) == 1
    assert "role 'chief': use one of officer, administrator" in capsys.readouterr().err
    assert main(["review", "add-user", "x", "--officer", "X", "--role", "sheriff",
                 "--password-stdin", *args]) == 1  # refused before a password is read
    with CaseFile(tmp_path / "cases.sqlite") as store:
        changes = [json.loads(e.detail) for e in store.audit()
                   if e.action == "change officer account role"]
        with pytest.raises(CaseError, match="already an officer"):
            set_role(store, "boss", OFFICER, "admin")
    assert changes == [{"username": "lund", "from": "officer", "to": "administrator"},
                       {"username": "boss", "from": "administrator", "to": "officer"}]


def test_accounts_made_before_roles_become_officers(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "cases.sqlite")
    migrate(connection, 4)
    connection.execute("INSERT INTO officer_accounts (username, officer, password_hash, "
                       "created_ns) VALUES ('old', 'Ofc. Old', '$argon2id$x', 1)")
    connection.commit()
    assert migrate(connection) >= 5
    assert connection.execute("SELECT role FROM officer_accounts").fetchall() == [("officer",)]
    with pytest.raises(sqlite3.IntegrityError):
        connection.execute("UPDATE officer_accounts SET role = 'chief'")
