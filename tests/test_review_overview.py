"""The overview, the app's first page (issue 35): devices placed now, up / late / silent by
their last stored frame; the findings no complaint links yet, with the complaint that covers
each; the open cases; and the search over case numbers, addresses and complainants, whose
results are an audited identity view. Against the real server of tests/test_review_http.py
(uvicorn, real InfluxDB, real case file) with a second device's evidence stored as the live
analyzer stores it."""

from __future__ import annotations

import dataclasses
import html
import json
import re

from influxdb_client import Point, WritePrecision

from analyzer.cases import CaseFile
from analyzer.review.overview import LATE_AFTER_S, SILENT_AFTER_S, condition
from analyzer.review.queries import DeviceState
from analyzer.store import InfluxClient
from tests.live_replay import store_as_live
from tests.review_scene import COMPLAINANT, DEVICE, OFFICER, T0, bark
from tests.test_review_http import Browser, Server, server

__all__ = ["server"]  # the module-scoped server fixture, one for this module
NS = 1_000_000_000
OTHER = "glencoe-0008"
LAST_FRAME_S = 6499  # the scene's device stores a frame each second of 6,500 from T0


def _state(last_frame_s: float | None, online: bool | None = True) -> DeviceState:
    return DeviceState(DEVICE, online, None,
                       None if last_frame_s is None else T0 + int(last_frame_s * NS), "", None)


def test_a_device_is_up_late_or_silent_by_the_age_of_its_last_frame() -> None:
    now = T0 + 10_000 * NS
    assert condition(_state(10_000 - LATE_AFTER_S), now) == "up"
    assert condition(_state(10_000 - LATE_AFTER_S - 1), now) == "late"
    assert condition(_state(10_000 - SILENT_AFTER_S), now) == "late"
    assert condition(_state(10_000 - SILENT_AFTER_S - 1), now) == "silent"
    assert condition(_state(None), now) == "silent"
    assert condition(_state(9_990, online=False), now) == "late"  # the broker says offline


def _second_device(server: Server) -> int:
    """``OTHER`` at 9 Pine Rd: 8 min of barking from T0 (one continuous finding, linked by
    no complaint), frames for 20 min; a complaint there whose span covers it."""
    review = server.review
    assert review is not None
    client: InfluxClient = review.client

    def level(second: int, time_ns: int) -> Point | None:
        if second >= 1200:
            return None
        return (Point("level").tag("device", OTHER).field("seq", second)
                .field("laeq_db", 66.0).field("lafmax_db", 70.0)
                .field("calibration_date", "2026-05-21").field("full_scale_db", 118.0)
                .time(time_ns, WritePrecision.NS))
    events = [dataclasses.replace(bark(t), device_id=OTHER) for t in range(0, 481, 20)]
    assert store_as_live(client, OTHER, events, T0, 1200, level) == 1
    with CaseFile(server.case.db) as store:
        address = store.add_address("9 Pine Rd", OFFICER)
        store.place_device(address, OTHER, T0 - 3600 * NS, OFFICER)
        return store.open_complaint(address, "Di Across", "555-0177", T0 + 900 * NS,
                                    T0 - 60 * NS, T0 + 700 * NS, True, OFFICER)


def _row(body: str, table: str, text: str) -> str:
    found = re.search(rf'<table id="{table}">.*?</table>', body, re.S)
    assert found, table
    for row in re.findall(r"<tr[^>]*>.*?</tr>", found.group(0), re.S):
        if text in row:
            return str(row)
    raise AssertionError(f"no row with {text!r} in {table}")


def test_the_overview_shows_devices_new_findings_and_open_cases(server: Server) -> None:
    covering = _second_device(server)
    browser = Browser(server.base)
    status, location, _ = browser.sign_in(next_path="")
    assert (status, location) == (303, "/overview")  # the first page after signing in
    saved = server.clock.now
    try:
        server.clock.now = T0 + (LAST_FRAME_S + 30) * NS
        status, _, body = browser.request("/overview")
        assert status == 200
        assert "1 up</span>, <span class=\"warn\">0 late</span>, <span class=\"bad\">1 silent" \
            in body
        scene = _row(body, "device-list", DEVICE)
        assert 'class="ok">up<' in scene and "2026-05-20; full scale 120.0 dB SPL" in scene
        assert "synchronised" in scene and "NOT" not in scene
        other = _row(body, "device-list", OTHER)
        assert 'class="bad">silent<' in other and "no heartbeat" in other
        assert body.index(OTHER) < body.index(DEVICE)  # silent first: it needs a visit
        finding = _row(body, "finding-list", OTHER)
        assert "continuous" in finding and "9 Pine Rd" in finding
        assert f'href="/cases/{covering}#findings"' in finding
        assert DEVICE not in re.search(r'<table id="finding-list">.*?</table>', body,
                                       re.S).group(0)  # type: ignore[union-attr]
        cases = re.search(r'<table id="open-case-list">.*?</table>', body, re.S)
        assert cases and f'href="/cases/{covering}"' in cases.group(0)
        assert f'href="/cases/{server.case.complaint}"' in cases.group(0)
        server.clock.now = T0 + (LAST_FRAME_S + LATE_AFTER_S + 60) * NS
        _, _, body = browser.request("/overview")
        assert 'class="warn">late<' in _row(body, "device-list", DEVICE)
    finally:
        server.clock.now = saved


def test_the_search_finds_cases_and_audits_the_complainants_it_shows(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    with CaseFile(server.case.db) as store:
        before = len(store.audit())
    _, _, body = browser.request("/overview?q=neighbour")
    results = re.search(r'<table id="results">.*?</table>', body, re.S)
    assert results and COMPLAINANT in results.group(0) and "12 Elm St" in results.group(0)
    assert "Cy Earlier" not in results.group(0)
    with CaseFile(server.case.db) as store:
        entries = store.audit()[before:]
    assert [(e.action, e.entity_id) for e in entries] == [
        ("view complainant identity", server.case.complaint)]
    assert '"matched_on_complainant": true' in entries[0].detail
    assert '"query": "neighbour"' in entries[0].detail
    _, _, body = browser.request(f"/overview?q=%23{server.case.complaint}")
    assert html.unescape(body).count(f'href="/cases/{server.case.complaint}"') >= 2
    _, _, body = browser.request("/overview?q=elm+st")
    results = re.search(r'<table id="results">.*?</table>', body, re.S)
    assert results and "2 case(s) match" in results.group(0)
    _, _, body = browser.request("/overview?q=nothing+like+it")
    assert "0 case(s) match" in body
    with CaseFile(server.case.db) as store:
        assert store.audit()[-1].detail.find("nothing like it") < 0  # no result, no view


def test_the_field_check_shows_the_device_live_as_the_page_does(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    saved = server.clock.now
    try:
        server.clock.now = T0 + (LAST_FRAME_S + 30) * NS  # frames 6470-6499 in the last 60 s
        status, _, body = browser.request(f"/addresses/{server.case.address}/placements/1/live")
        assert status == 200
        live = json.loads(body)
        assert (live["condition"], live["frames_last_minute"], live["laeq_now"]) == (
            "up", "30 of 60", "42.0 dB(A)")
        assert live["calibration"] == "2026-05-20; full scale 120.0 dB SPL"
        assert (live["clock"], live["outbox"]) == ("synchronised", "0 frame(s) waiting")
        assert live["coverage"] == "7.0 % of 25.8 h measured"  # 6,500 s of a day and 6,529 s
        assert live["last_frame"].startswith("2026-06-01 21:48:19") and "30 s ago" in \
            live["last_frame"]
        _, _, page = browser.request(f"/addresses/{server.case.address}/devices")
        section = re.search(r'<section class="field-check".*?</section>', page, re.S)
        assert section and 'data-live-url="/addresses/' in section.group(0)
        for field in ("frames_last_minute", "laeq_now", "calibration", "clock", "outbox",
                      "coverage"):
            assert f'data-field="{field}">{html.escape(live[field])}<' in section.group(0)
        assert '<script src="/static/devices.js">' in page
        status, _, body = browser.request(f"/addresses/{server.case.address}/placements/99/live")
        assert status == 404 and "has no placement 99" in body
    finally:
        server.clock.now = saved
