"""Issue 33, the review application under attack: each defect's regression, against the real
server (uvicorn on a free loopback port, real InfluxDB, real case file) of
tests/test_review_http.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from analyzer.cases import CaseFile, add_account, disable_account
from analyzer.cli.main import main
from analyzer.review import hash_password
from tests.test_review_http import NS, PASSWORD, Browser, Server, server

__all__ = ["server"]  # the module-scoped server fixture, one for this module


def _new_account(server: Server, username: str) -> None:
    with CaseFile(server.case.db) as store:
        add_account(store, username, f"Ofc. {username.title()}", hash_password(PASSWORD),
                    "admin")


def test_a_disabled_account_loses_its_open_session_at_the_next_request(server: Server) -> None:
    _new_account(server, "dis")
    browser = Browser(server.base)
    assert browser.sign_in(PASSWORD, "dis")[0] == 303
    assert browser.request("/cases")[0] == 200
    with CaseFile(server.case.db) as store:
        disable_account(store, "dis", "admin")
    status, location, _ = browser.request(f"/cases/{server.case.complaint}")
    assert (status, location) == (303, f"/signin?next=/cases/{server.case.complaint}")
    status, location, _ = browser.request(f"/cases/{server.case.complaint}/record/observation",
                                          {"csrf_token": browser.token, "note": "after"})
    assert (status, location) == (303, "/signin")
    with CaseFile(server.case.db) as store:
        assert not store.observations(server.case.complaint) or all(
            o.notes != "after" for o in store.observations(server.case.complaint))


def test_a_changed_password_ends_the_sessions_opened_with_the_old_one(server: Server) -> None:
    _new_account(server, "chg")
    browser = Browser(server.base)
    assert browser.sign_in(PASSWORD, "chg")[0] == 303
    with CaseFile(server.case.db) as store:
        store.db.execute("UPDATE officer_accounts SET password_hash = ? WHERE username = ?",
                         (hash_password("another long password"), "chg"))
    assert browser.request("/cases")[0] == 303


def test_a_contact_attempt_dated_2100_is_refused_by_the_case_file(server: Server) -> None:
    from analyzer.cases import CaseError, parse_local_time
    with CaseFile(server.case.db) as store, pytest.raises(CaseError,
                                                          match="outside the plausible window"):
        store.add_contact_attempt(server.case.complaint, parse_local_time("2100-01-01 10:00"),
                                  "phone", "no_answer", "Ofc. Kay")


def test_a_record_dated_after_2262_from_the_web_form_is_refused_not_a_500(
        server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    path = f"/cases/{server.case.complaint}"
    browser.request(path)  # the case page's form token
    status, _, _ = browser.request(f"{path}/record/observation", {
        "csrf_token": browser.token, "note": "late", "at": "2999-01-01 10:00"})
    assert status == 303
    status, _, body = browser.request(path)
    assert status == 200 and "outside the plausible window" in body


def test_a_right_to_left_override_or_an_escape_in_a_name_or_note_is_refused(
        server: Server) -> None:
    from analyzer.cases import CaseError
    with CaseFile(server.case.db) as store:
        with pytest.raises(CaseError, match="U\\+202E at position 4"):
            store.add_address("12 \u202eElm", "Ofc. Kay")
        with pytest.raises(CaseError, match="U\\+001B"):
            store.add_observation(server.case.complaint, server.clock.now, "Ofc. Kay",
                                  "ok \x1b[2J\x1b]0;owned\x07")
        assert store.add_observation(server.case.complaint, server.clock.now, "Ofc. Kay",
                                     "two\r\nlines\tand a tab") > 0


def test_case_show_escapes_control_characters_already_in_the_file() -> None:
    from analyzer.cases.store import shown_safely
    assert shown_safely("a\x1b[2Jb\u202ec\nd") == "a\\u001b[2Jb\\u202ec\nd"


def _raw(server: Server, head: str, body: bytes = b"") -> tuple[int, dict[str, str]]:
    """Send one raw HTTP/1.1 request; (status, headers) of the answer."""
    import socket
    host, port = server.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        data = b""
        for _ in range(1000):  # bounded: an answer's head is well under 1000 chunks
            chunk = sock.recv(65536)
            if not chunk or b"\r\n\r\n" in data + chunk:
                data += chunk
                break
            data += chunk
    lines = data.split(b"\r\n\r\n")[0].decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}


def test_an_id_at_or_above_2_to_the_63_is_a_404_with_the_security_headers(
        server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    status, _, body = browser.request(f"/cases/{2**63}")
    assert status == 404 and "There is no such page." in body
    cookie = "; ".join(f"{c.name}={c.value}" for c in browser.jar)
    status, headers = _raw(server, f"GET /cases/{2**64} HTTP/1.1\r\nHost: x\r\n"
                                   f"Cookie: {cookie}\r\n")
    assert status == 404 and "content-security-policy" in headers


def test_a_body_over_the_limit_is_refused_413_before_it_is_read(server: Server) -> None:
    status, headers = _raw(server, "POST /signin HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                   "application/x-www-form-urlencoded\r\n"
                                   f"Content-Length: {200 * 1024 * 1024}\r\n")
    assert status == 413 and "content-security-policy" in headers


def test_a_streamed_body_past_the_limit_is_refused_413(server: Server) -> None:
    body = b"a=" + b"x" * 70000
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    status, _ = _raw(server, "POST /signin HTTP/1.1\r\nHost: x\r\nContent-Type: "
                             "application/x-www-form-urlencoded\r\n"
                             "Transfer-Encoding: chunked\r\n", chunked)
    assert status == 413


def test_a_multipart_body_is_refused_415(server: Server) -> None:
    status, headers = _raw(server, "POST /signin HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                   "multipart/form-data; boundary=b\r\nContent-Length: 0\r\n")
    assert status == 415 and "x-frame-options" in headers


def test_unlock_user_reaches_the_running_server(
        server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _new_account(server, "unl")
    # The unlock is dated by the command's wall clock: put the server's clock before it.
    server.clock.now = time.time_ns() - 300 * NS
    browser = Browser(server.base)
    for _ in range(8):  # 3 free, then delays that double: the last one is 16 s
        browser.sign_in("wrong password", "unl")
        server.clock.now += 20 * NS
    server.clock.now -= 20 * NS
    assert browser.sign_in(PASSWORD, "unl")[0] == 429
    config = tmp_path / "review.toml"
    config.write_text(f'cases_db = "{server.case.db}"\n', encoding="utf-8")
    assert main(["review", "unlock-user", "unl", "--config", str(config), "--by", "admin"]) == 0
    assert "unlocked" in capsys.readouterr().out
    assert browser.sign_in(PASSWORD, "unl")[0] == 303


def test_an_unknown_name_is_not_kept_in_the_audit_log(server: Server) -> None:
    Browser(server.base).sign_in(PASSWORD, "my-secret-password")
    with CaseFile(server.case.db) as store:
        assert "my-secret-password" not in " ".join(e.detail for e in store.audit())


def test_a_flood_of_refused_sign_ins_adds_one_audit_row(server: Server) -> None:
    _new_account(server, "fld")
    server.clock.now += 901 * NS  # a new window of this address's refusals
    browser = Browser(server.base)
    for _ in range(3):
        browser.sign_in("wrong password", "fld")
    with CaseFile(server.case.db) as store:
        before = len(store.audit())
    for _ in range(30):  # bounded: 30 refused attempts within the delay
        assert browser.sign_in("wrong password", "fld")[0] == 429
    with CaseFile(server.case.db) as store:
        added = [e.action for e in store.audit()[before:]]
    assert added == ["sign-in refused: rate limit"]
