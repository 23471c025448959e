"""Issue 33, the review application under attack: each defect's regression, against the real
server (uvicorn on a free loopback port, real InfluxDB, real case file) of
tests/test_review_http.py."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import socket
import sqlite3
import stat
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from analyzer.cases import CaseFile, add_account, disable_account
from analyzer.cli.main import main
from analyzer.review import ReviewSettings, create_app, hash_password
from analyzer.review.server import unix_listening_socket, uvicorn_config
from analyzer.review.settings import ReviewConfigError, load_review_settings
from analyzer.review.signin import REFUSALS_SUMMARISED
from tests.review_scene import COMPLAINANT
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
    status, _, body = browser.request(f"{path}/record/observation", {
        "csrf_token": browser.token, "note": "late", "at": "2999-01-01 10:00"})
    assert status == 400 and "outside the plausible window" in body  # beside the form


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
    # The window closes: the next sign-in from anyone audits how many it held beyond that row.
    server.clock.now += 901 * NS
    Browser(server.base).sign_in(PASSWORD)
    with CaseFile(server.case.db) as store:
        summaries = [e for e in store.audit()[before:] if e.action == REFUSALS_SUMMARISED]
    assert [json.loads(e.detail)["refusals_not_recorded"] for e in summaries] == [29]


def test_the_refusals_of_an_open_window_are_audited_when_the_server_stops(
        tmp_path: Path) -> None:
    db = tmp_path / "cases.sqlite"
    with CaseFile(db):
        pass
    app = create_app(ReviewSettings(cases_db=str(db)))
    limiter = app.state.review.limiter
    for _ in range(12):
        limiter.refused("192.0.2.4", now_s=time.time())

    async def start_and_stop() -> None:
        async with app.router.lifespan_context(app):
            pass
    asyncio.run(start_and_stop())
    with CaseFile(db) as store:
        rows = [json.loads(e.detail) for e in store.audit() if e.action == REFUSALS_SUMMARISED]
    assert [(r["client"], r["refusals_not_recorded"]) for r in rows] == [("192.0.2.4", 11)]


def _stored_raw(db: Path, complaint: int, name: str) -> None:
    """Write a name as a record from before the check at entry could hold it."""
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE complaints SET complainant_name = ? WHERE id = ?",
                           (name, complaint))


def test_control_characters_already_in_the_case_file_are_shown_escaped_in_pages_and_report(
        server: Server) -> None:
    _stored_raw(server.case.db, server.case.complaint, "Ann \u202eeno\x1b[2J Doe")
    try:
        browser = Browser(server.base)
        browser.sign_in()
        for path in (f"/cases/{server.case.complaint}",
                     f"/cases/{server.case.complaint}/report.html"):
            status, _, body = browser.request(path)
            assert status == 200
            assert "Ann \\u202eeno\\u001b[2J Doe" in html.unescape(body), path
            assert "\u202e" not in body and "\x1b" not in body, path
    finally:
        _stored_raw(server.case.db, server.case.complaint, COMPLAINANT)


def test_the_session_cookie_is_not_secure_over_plain_http(server: Server) -> None:
    _, headers = _raw(server, "GET /signin HTTP/1.1\r\nHost: x\r\n")
    assert "secure" not in headers["set-cookie"].lower()
    assert "strict-transport-security" not in headers


def _unix_request(path: str, head: str, body: str = "") -> tuple[int, dict[str, str], str]:
    """One HTTP/1.1 request over a Unix socket; (status, headers, body)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(path)
        sock.sendall(head.encode() + b"\r\n" + body.encode())
        data = b""
        for _ in range(1000):  # bounded: the answer is well under 1000 chunks
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head_part, _, answer = data.partition(b"\r\n\r\n")
    lines = head_part.decode().split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, answer.decode(errors="replace")


def test_on_a_unix_socket_only_the_proxy_names_the_client_and_https_makes_cookies_secure(
        tmp_path: Path) -> None:
    db, path = tmp_path / "cases.sqlite", str(tmp_path / "review.sock")
    with CaseFile(db) as store:
        add_account(store, "uds", "Ofc. Uds", hash_password(PASSWORD), "admin")
    settings = ReviewSettings(cases_db=str(db), unix_socket=path)
    sock = unix_listening_socket(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
    running = uvicorn.Server(uvicorn_config(settings))
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not running.started:
            assert thread.is_alive(), "server did not start"
            time.sleep(0.05)
        forwarded = ("Host: x\r\nConnection: close\r\nX-Forwarded-For: 203.0.113.7\r\n"
                     "X-Forwarded-Proto: https\r\n")
        status, headers, body = _unix_request(path, f"GET /signin HTTP/1.1\r\n{forwarded}")
        assert status == 200
        assert "secure" in headers["set-cookie"].lower()
        assert headers["strict-transport-security"] == "max-age=31536000"
        cookie = headers["set-cookie"].split(";")[0]
        token = re.search(r'name="csrf_token" value="([^"]+)"', body)
        assert token is not None
        form = f"csrf_token={token.group(1)}&username=uds&password=wrong+password"
        status, _, _ = _unix_request(
            path, f"POST /signin HTTP/1.1\r\n{forwarded}Cookie: {cookie}\r\nContent-Type: "
            f"application/x-www-form-urlencoded\r\nContent-Length: {len(form)}\r\n", form)
        assert status == 401
        with pytest.raises(ReviewConfigError, match="already listens"):
            unix_listening_socket(path)
    finally:
        running.should_exit = True
        thread.join(timeout=30)
    with CaseFile(db) as store:
        refused = [json.loads(e.detail) for e in store.audit() if e.action == "sign-in refused"]
    assert [r["client"] for r in refused] == ["203.0.113.7"]


def test_a_unix_socket_and_a_trusted_proxy_together_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "review.toml"
    config.write_text('unix_socket = "/run/x.sock"\ntrusted_proxy = "127.0.0.1"\n',
                      encoding="utf-8")
    with pytest.raises(ReviewConfigError, match="exclude each other"):
        load_review_settings(str(config))


def test_pages_that_query_influxdb_are_bounded_per_officer_and_answer_503_past_it(
        server: Server) -> None:
    assert server.review is not None
    gate = server.review.page_queries
    browser = Browser(server.base)
    browser.sign_in()
    officer = "Ofc. Kay"
    for _ in range(gate.per_officer):  # the officer's other pages, still being answered
        gate.acquire(officer)
    try:
        for path in ("/cases", f"/cases/{server.case.complaint}",
                     f"/addresses/{server.case.address}/devices"):
            status, _, body = browser.request(path)
            assert status == 503 and "pages being answered" in html.unescape(body), path
        other = Browser(server.base)  # another officer is not held back
        _new_account(server, "pgq")
        other.sign_in(PASSWORD, "pgq")
        assert other.request("/cases")[0] == 200
    finally:
        for _ in range(gate.per_officer):
            gate.release(officer)
    assert browser.request("/cases")[0] == 200 and gate.running == 0
