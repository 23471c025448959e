"""The review application under load (issue 33): PDF renders bounded in number and time and
stopped when abandoned, plot queries bounded per officer and in all, a stop that finishes while
a render runs. Real uvicorn on free loopback ports, a real InfluxDB and case file."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from analyzer.cases import CaseFile
from analyzer.cases.store import MAX_NOTE_CHARS
from analyzer.deploy.services import Services, free_port
from analyzer.review import ReviewSettings, create_app, hash_password
from analyzer.review.context import Review
from analyzer.review.limits import LoadLimits
from analyzer.review.queries import plot_data
from analyzer.store import InfluxClient, InfluxSettings
from analyzer.store.rollup import LEVEL_ROLLUP, PROGRESS_ROLLUP, backfill
from tests.conftest import wait_until
from tests.review_scene import (
    DEVICE,
    OFFICER,
    T0,
    Case,
    evidence_with_case,
)
from tests.test_review_http import PASSWORD, USER, Browser, Clock

NS = 1_000_000_000
HEAVY_NOTE_CHARS = 400_000  # entered before notes were bounded: seconds of layout at best


@dataclass
class Scene:
    root: Path
    influx_url: str
    case: Case
    heavy: int  # a complaint whose report holds a note of HEAVY_NOTE_CHARS


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("review-load")
    with Services(root / "services") as services:
        case = evidence_with_case(services.influx.url, root / "cases.sqlite", USER, "Ofc. Kay",
                                  hash_password(PASSWORD))
        with CaseFile(case.db) as store:
            heavy = store.open_complaint(case.address, "Di Later", "555-0102",
                                         T0 - 86400 * NS, T0 - 87000 * NS, T0 - 86000 * NS,
                                         True, OFFICER)
            # As an old case file holds it: written before the bound, past CaseStore's check.
            with store.db:
                store.db.execute("INSERT INTO observations (complaint_id, at_ns, officer, "
                                 "notes) VALUES (?, ?, ?, ?)",
                                 (heavy, T0, OFFICER, ("barking again " * 40_000)[
                                     :HEAVY_NOTE_CHARS]))
        yield Scene(root, services.influx.url, case, heavy)



@dataclass
class Running:
    base: str
    review: Review


@contextmanager
def serving(scene: Scene, **limits: Any) -> Iterator[Running]:
    """The review application with ``limits``, in this process (its state is inspectable)."""
    port = free_port()
    settings = ReviewSettings(port=port, cases_db=str(scene.case.db), session_idle_s=3600,
                              influx=InfluxSettings(url=scene.influx_url),
                              limits=LoadLimits(**limits))
    app = create_app(settings, Clock())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), 30, "the server to start")
    assert thread.is_alive(), "server did not start"
    try:
        yield Running(f"http://127.0.0.1:{port}", app.state.review)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def gone(pid: int) -> bool:
    """The process has exited (a zombie counts: it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def fetch(browser: Browser, path: str) -> tuple[int, bytes]:
    request = urllib.request.Request(browser.base + path)
    try:
        with browser.opener.open(request, timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def open_request(browser: Browser, path: str) -> socket.socket:
    """Send a GET with the browser's cookie and leave the answer unread (the caller closes
    the socket to abandon it)."""
    cookie = "; ".join(f"{c.name}={c.value}" for c in browser.jar)
    host, port = browser.base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n\r\n"
                 .encode())
    return sock


def test_the_pdf_and_the_html_report_are_made_in_renderers_that_are_gone_afterwards(
        scene: Scene) -> None:
    with serving(scene) as running:
        browser = Browser(running.base)
        browser.sign_in()
        status, body = fetch(browser, f"/cases/{scene.case.complaint}/report.pdf")
        assert status == 200 and body[:5] == b"%PDF-"
        status, body = fetch(browser, f"/cases/{scene.case.complaint}/report.html")
        assert status == 200 and b"Ann Neighbour" in body and b"<script" not in body
        assert len(running.review.renders.pids) == 2
        assert running.review.renders.places == 0 and running.review.renders.running == 0
        wait_until(lambda: gone(running.review.renders.pids[-1]), 10, "the renderer to exit")


def test_a_render_past_its_time_limit_is_killed_and_answered_504(scene: Scene) -> None:
    with serving(scene, render_timeout_s=0.01) as running:
        browser = Browser(running.base)
        browser.sign_in()
        status, body = fetch(browser, f"/cases/{scene.case.complaint}/report.pdf")
        assert status == 504
        assert b"The report took longer than 0.01 s to make and was stopped" in body
        assert running.review.renders.running == 0
        wait_until(lambda: gone(running.review.renders.pids[-1]), 10, "the renderer to die")


def test_pdfs_past_the_renderers_places_are_answered_503_and_an_abandoned_one_stops(
        scene: Scene) -> None:
    with serving(scene, render_workers=1, render_queue=0, render_timeout_s=300) as running:
        renders = running.review.renders
        browser = Browser(running.base)
        browser.sign_in()
        abandoned = open_request(browser, f"/cases/{scene.heavy}/report.pdf")
        try:
            wait_until(lambda: renders.running == 1, 60, "the heavy render to start")
            status, body = fetch(browser, f"/cases/{scene.case.complaint}/report.pdf")
            assert status == 503 and b"The report renderer is busy" in body
            status, body = fetch(browser, f"/cases/{scene.case.complaint}/report.html")
            assert status == 503 and b"The report renderer is busy" in body  # the same places
            assert fetch(browser, "/cases")[0] == 200  # pages are answered meanwhile
        finally:
            abandoned.close()
        wait_until(lambda: renders.running == 0 and renders.places == 0, 30,
                   "the abandoned render to be stopped")
        assert renders.abandoned == 1
        wait_until(lambda: gone(renders.pids[-1]), 10, "the abandoned renderer to die")


def test_plot_queries_past_the_officers_and_the_overall_limit_are_answered_503(
        scene: Scene) -> None:
    with serving(scene, queries_per_officer=1, queries_in_all=2) as running:
        gate = running.review.plot_queries
        browser = Browser(running.base)
        browser.sign_in()
        data = f"/cases/{scene.case.complaint}/findings/1/data"
        assert fetch(browser, data)[0] == 200
        gate.acquire("Ofc. Kay")  # as if one of Kay's zooms were being answered
        status, body = fetch(browser, data)
        assert status == 503 and b"at most 1 at a time" in body
        gate.release("Ofc. Kay")
        gate.acquire("Ofc. Lund")
        gate.acquire("Ofc. Moe")  # two others' queries: the overall limit
        status, body = fetch(browser, data)
        assert status == 503 and b"answering 2 plot requests" in body
        gate.release("Ofc. Moe")
        assert fetch(browser, data)[0] == 200 and gate.running == 1


def descendants(pid: int, below: int = 1) -> set[int]:
    """Every process ``below`` or more generations under ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):
            parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    for generation in range(1, 10):  # a renderer is two down (fork server, renderer)
        frontier = {child for child, parent in parents.items() if parent in frontier}
        if not frontier:
            break
        if generation >= below:
            found |= frontier
    return found


def test_sigterm_stops_the_server_within_seconds_while_a_render_runs(scene: Scene) -> None:
    port = free_port()
    config = scene.root / "review-sigterm.toml"
    config.write_text(f'port = {port}\ncases_db = "{scene.case.db}"\n'
                      f'[influx]\nurl = "{scene.influx_url}"\n'
                      "[limits]\nrender_timeout_s = 300\ngraceful_shutdown_s = 2\n",
                      encoding="utf-8")
    server = subprocess.Popen([sys.executable, "-m", "analyzer.cli.main", "review", "--config",
                               str(config)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: server.poll() is not None or _listening(port), 60,
                   "barkwatch review to listen")
        browser = Browser(base)
        browser.sign_in()
        request = open_request(browser, f"/cases/{scene.heavy}/report.pdf")
        wait_until(lambda: bool(descendants(server.pid, below=2)), 60,
                   "the renderer to start (a child of the fork server)")
        below = descendants(server.pid)
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("barkwatch review still ran 20 s after SIGTERM with a render running")
        wait_until(lambda: all(gone(pid) for pid in below), 10, "the renderers to exit")
        request.close()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_a_wide_plot_is_read_from_the_one_minute_rollups_with_the_frames_values(
        scene: Scene) -> None:
    client = InfluxClient(InfluxSettings(url=scene.influx_url))
    names = {row[0] for s in client.query("SHOW CONTINUOUS QUERIES", database="")
             for row in s["values"]}
    assert {LEVEL_ROLLUP, PROGRESS_ROLLUP} <= names  # made with the database
    backfill(client, T0 - 86400 * NS, T0 + 86400 * NS)  # the CQs only see recent minutes
    start_ns, end_ns = T0 - 86400 * NS, T0 + 86400 * NS
    frames = plot_data(client, DEVICE, start_ns, end_ns, 1500)
    with serving(scene) as running:
        browser = Browser(running.base)
        browser.sign_in()
        status, body = fetch(browser, f"/cases/{scene.case.complaint}/findings/1/data?"
                             f"from={start_ns // 1_000_000}&to={end_ns // 1_000_000}")
    wide = json.loads(body)
    assert status == 200 and wide["interval_s"] == 120 and wide["source"] == LEVEL_ROLLUP
    assert frames.source == "level" and len(frames.levels) == 6500 // 120 + 1
    assert wide["levels"] == frames.levels and wide["progress"] == frames.progress


def test_a_wide_plot_whose_rollups_were_never_made_says_so_instead_of_drawing_nothing(
        scene: Scene) -> None:
    client = InfluxClient(InfluxSettings(url=scene.influx_url))
    later = T0 + 20 * 86400 * NS  # frames stored, never rolled up (no backfill, too old for CQs)
    client.write_lines([f"level,device={DEVICE} laeq_db=50,lafmax_db=60 {later + i * NS}"
                        for i in range(120)])
    with serving(scene) as running:
        browser = Browser(running.base)
        browser.sign_in()
        status, body = fetch(browser, f"/cases/{scene.case.complaint}/findings/1/data?"
                             f"from={(later - 86400 * NS) // 1_000_000}"
                             f"&to={(later + 86400 * NS) // 1_000_000}")
    assert status == 503 and b"the one-minute rollups (level_1m) hold nothing" in body


def test_a_web_note_over_the_bound_is_refused_and_the_form_states_the_bound(
        scene: Scene) -> None:
    with serving(scene) as running:
        browser = Browser(running.base)
        browser.sign_in()
        page = f"/cases/{scene.case.complaint}"
        _, _, body = browser.request(page)
        assert f'maxlength="{MAX_NOTE_CHARS}"' in body and "up to\n4,000 characters" in body
        status, _, body = browser.request(f"{page}/record/observation", {
            "csrf_token": browser.token, "at": "", "note": "w" * (MAX_NOTE_CHARS + 1)})
    assert status == 400  # the case page again, the reason beside the form
    assert "The observation was not recorded: observation has 4,001 characters; at most " \
           "4,000 are kept" in body
