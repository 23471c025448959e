"""The review application over plain HTTP (no browser): the real server (uvicorn on a free
loopback port) with a real InfluxDB and case file; its clock is the test's, so expiry is
checked without waiting."""

from __future__ import annotations

import html
import http.cookiejar
import io
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn

from analyzer.cases import CaseFile, add_account
from analyzer.cli.main import main
from analyzer.deploy.services import Services
from analyzer.review import ReviewSettings, create_app, hash_password
from analyzer.review.context import Review
from analyzer.store import InfluxSettings
from tests.review_scene import (
    COMPLAINANT,
    T0,
    Case,
    evening_barks,
    evidence_with_case,
)

NS = 1_000_000_000
USER, OFFICER, PASSWORD = "kay", "Ofc. Kay", "correct horse battery"


class Clock:
    """The server's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = time.time_ns()

    def __call__(self) -> int:
        return self.now


@dataclass
class Server:
    base: str
    case: Case
    clock: Clock
    review: Review | None = None  # the running application's state


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("review-http")
    with Services(root / "services") as services:
        case = evidence_with_case(services.influx.url, root / "cases.sqlite", USER, OFFICER,
                                  hash_password(PASSWORD))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        clock = Clock()
        settings = ReviewSettings(port=port, cases_db=str(case.db), session_idle_s=600,
                                  max_failures_per_account=3, max_failures_per_address=50,
                                  influx=InfluxSettings(url=services.influx.url))
        app = create_app(settings, clock)
        running = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                                log_config=None))
        thread = threading.Thread(target=running.run, daemon=True)
        thread.start()
        while not running.started:
            assert thread.is_alive(), "server did not start"
            time.sleep(0.05)
        try:
            yield Server(f"http://127.0.0.1:{port}", case, clock, app.state.review)
        finally:
            running.should_exit = True
            thread.join(timeout=30)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class Browser:
    """A cookie jar and the last page's form token; redirects are not followed."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar),
                                                  NoRedirect())
        self.token = ""

    def request(self, path: str, form: dict[str, str] | None = None) -> tuple[int, str, str]:
        """(status, Location or '', body); a page's CSRF token is kept for the next form."""
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        try:
            with self.opener.open(self.base + path, data) as response:
                status, location, body = response.status, "", response.read().decode()
        except urllib.error.HTTPError as exc:
            status, location = exc.code, exc.headers.get("Location", "")
            body = exc.read().decode(errors="replace")
        found = re.search(r'name="csrf_token" value="([^"]+)"', body)
        if found:
            self.token = found.group(1)
        return status, location, body

    def sign_in(self, password: str = PASSWORD, username: str = USER,
                next_path: str = "/cases") -> tuple[int, str, str]:
        self.request("/signin")
        return self.request("/signin", {"csrf_token": self.token, "username": username,
                                        "password": password, "next": next_path})


def test_signing_in_redirects_to_the_page_asked_for(server: Server) -> None:
    status, location, _ = Browser(server.base).sign_in(next_path="/cases/2")
    assert (status, location) == (303, "/cases/2")


def test_a_next_address_on_another_site_is_ignored(server: Server) -> None:
    status, location, _ = Browser(server.base).sign_in(next_path="//evil.example/cases")
    assert (status, location) == (303, "/overview")


def test_an_account_is_delayed_after_its_failures_from_an_address_even_with_the_right_password(
        server: Server) -> None:
    with CaseFile(server.case.db) as store:
        add_account(store, "lim", "Ofc. Lim", hash_password(PASSWORD), "admin")
    browser = Browser(server.base)
    for _ in range(3):
        assert browser.sign_in("wrong password", "lim")[0] == 401
    status, _, body = browser.sign_in(PASSWORD, "lim")
    assert status == 429 and "for this account from this address" in body
    with CaseFile(server.case.db) as store:
        actions = [e.action for e in store.audit() if e.actor == "Ofc. Lim"]
    assert actions == ["sign-in refused"] * 3 + ["sign-in refused: rate limit"]
    server.clock.now += 2 * NS  # the first delay (1 s) has passed
    assert browser.sign_in(PASSWORD, "lim")[0] == 303


def test_an_unknown_user_name_gets_the_same_answer_as_a_wrong_password(server: Server) -> None:
    status, _, body = Browser(server.base).sign_in(PASSWORD, "nobody")
    assert status == 401 and "Wrong user name or password." in body


def test_a_cookie_kept_from_before_sign_out_opens_nothing(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    copied = list(browser.jar)
    assert browser.request("/cases")[0] == 200
    browser.request(f"/cases/{server.case.complaint}")
    browser.request("/signout", {"csrf_token": browser.token})
    for cookie in copied:  # put the signed cookie from before sign-out back
        browser.jar.set_cookie(cookie)
    status, location, _ = browser.request("/cases")
    assert (status, location) == (303, "/signin?next=/cases")


def test_a_session_unused_longer_than_its_idle_limit_expires(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    server.clock.now += 599 * NS
    assert browser.request("/cases")[0] == 200  # used: the idle time starts again
    server.clock.now += 601 * NS
    assert browser.request("/cases")[0] == 303


def test_sign_out_without_the_form_token_is_refused(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    status, _, body = browser.request("/signout", {"csrf_token": "forged"})
    assert status == 403 and "CSRF" in body
    assert browser.request("/cases")[0] == 200  # still signed in


def test_the_report_in_the_browser_audits_every_complainant_it_names(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    with CaseFile(server.case.db) as store:
        before = len(store.audit())
    status, _, html = browser.request(f"/cases/{server.case.complaint}/report.html")
    assert status == 200 and COMPLAINANT in html and "Cy Earlier" in html
    with CaseFile(server.case.db) as store:
        views = [(e.actor, e.entity_id) for e in store.audit()[before:]
                 if e.action == "view complainant identity"]
    assert sorted(views) == [(OFFICER, 1), (OFFICER, server.case.complaint)]


def test_the_report_pdf_is_served(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    request = urllib.request.Request(f"{server.base}/cases/{server.case.complaint}/report.pdf")
    with browser.opener.open(request) as response:
        assert response.headers["Content-Type"] == "application/pdf"
        assert response.read(5) == b"%PDF-"


def test_plot_data_is_downsampled_by_influxdb_to_the_point_budget(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    from_ms = T0 // 1_000_000
    status, _, body = browser.request(f"/cases/{server.case.complaint}/findings/1/data?"
                                      f"from={from_ms}&to={from_ms + 6000 * 1000}")
    data = json.loads(body)
    assert status == 200 and data["interval_s"] == 5  # 6,000 s / 1,500 points -> 5 s
    assert data["level_points"] is None and len(data["levels"]) == 6000 // 5
    assert data["levels"][0][1:] == [(70.0 + 4 * 42.0) / 5, 78.0]  # a bark, then quiet
    assert len(data["events"]) == len(evening_barks())
    _, _, body = browser.request(f"/cases/{server.case.complaint}/findings/1/data?"
                                 f"from={from_ms}&to={from_ms + 600 * 1000}")
    fine = json.loads(body)
    assert fine["interval_s"] == 1 and fine["level_points"] == 600  # each frame itself
    assert [row[1] for row in fine["levels"][:21]] == [70.0] + [42.0] * 19 + [70.0]


def test_a_plot_range_out_of_bounds_is_refused_with_the_reason(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    status, _, body = browser.request(f"/cases/{server.case.complaint}/findings/1/data?"
                                      "from=0&to=5000")
    assert status == 400 and "a plot spans 10 s to 31 days; asked 5 s" in body
    status, _, body = browser.request(f"/cases/{server.case.complaint}/findings/1/data?"
                                      "from=abc")
    assert status == 400 and "from='abc' is not a time in ms" in html.unescape(body)


def test_an_unknown_case_is_a_404_that_says_so(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    status, _, body = browser.request("/cases/99")
    assert status == 404 and "no complaint 99" in body


def test_add_user_reads_the_password_from_stdin_and_stores_only_its_hash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "review.toml"
    config.write_text(f'cases_db = "{tmp_path / "cases.sqlite"}"\n', encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO("a long enough password\n"))
    assert main(["review", "add-user", "lund", "--officer", "Ofc. Lund", "--config",
                 str(config), "--password-stdin", "--by", "admin"]) == 0
    assert "account #1: lund (Ofc. Lund)" in capsys.readouterr().out
    with CaseFile(tmp_path / "cases.sqlite") as store:
        text = " ".join(e.detail for e in store.audit())
        row = store.db.execute("SELECT password_hash FROM officer_accounts").fetchone()
    assert row[0].startswith("$argon2id$") and "long enough" not in row[0] + text


def test_a_short_password_is_refused_by_add_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "review.toml"
    config.write_text(f'cases_db = "{tmp_path / "cases.sqlite"}"\n', encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert main(["review", "add-user", "lund", "--officer", "Ofc. Lund", "--config",
                 str(config), "--password-stdin"]) == 1
    assert "the password has 5 characters; use at least 10" in capsys.readouterr().err


def test_review_without_a_configuration_exits_2_and_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["review"]) == 2
    assert "--config FILE is needed" in capsys.readouterr().err


def test_a_configuration_with_half_of_the_tls_settings_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "review.toml"
    config.write_text('ssl_keyfile = "key.pem"\n', encoding="utf-8")
    assert main(["review", "--config", str(config)]) == 1
    assert "'ssl_keyfile' and 'ssl_certfile' go together" in capsys.readouterr().err
