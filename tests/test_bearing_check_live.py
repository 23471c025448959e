"""The array's clap check reaches the field check (issue 36, item 5): ``barkwatch-sensor
bearing-check`` on simulated claps sends its result through a real Mosquitto to the real live
analyzer, which stores it in a real InfluxDB; the review app's field check (real server,
real case file) shows it. A malformed result is refused and counted, and nothing stops."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
import soundfile
import uvicorn

from analyzer.cases import CaseFile, add_account
from analyzer.deploy.services import Services
from analyzer.ingest.service import Analyzer
from analyzer.review import ReviewSettings, create_app, hash_password
from analyzer.store import InfluxClient, InfluxSettings
from sensor.array import ArraySettings
from sensor.bearing_report import bearing_check_topic
from sensor.cli import main
from tests.conftest import wait_until
from tests.test_bearing_check import RATE, claps_as_plane_wave
from tests.test_end_to_end import analyzer_config
from tests.test_review_http import PASSWORD, Browser, Clock

NS = 1_000_000_000
OFFICER = "Ofc. Kay"


@dataclass
class Site:
    services: Services
    analyzer: Analyzer
    base: str
    db: Path
    root: Path
    clock: Clock  # the review app's: a page and its live poll read at the same moment


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """Mosquitto, InfluxDB, the live analyzer and the review app over one case file."""
    root = tmp_path_factory.mktemp("bearing-check-live")
    with Services(root / "services") as services:
        db = root / "cases.sqlite"
        with CaseFile(db) as store:
            add_account(store, "kay", OFFICER, hash_password(PASSWORD), "setup")
        InfluxClient(InfluxSettings(url=services.influx.url)).create_database()
        analyzer = Analyzer(analyzer_config(services))
        analyzer.start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        settings = ReviewSettings(port=port, cases_db=str(db),
                                  influx=InfluxSettings(url=services.influx.url))
        clock = Clock()
        running = uvicorn.Server(uvicorn.Config(create_app(settings, clock), host="127.0.0.1",
                                                port=port, log_config=None))
        thread = threading.Thread(target=running.run, daemon=True)
        thread.start()
        try:
            wait_until(lambda: running.started or not thread.is_alive(), 60, "the review app")
            wait_until(analyzer.connected.is_set, what="the analyzer to connect")
            yield Site(services, analyzer, f"http://127.0.0.1:{port}", db, root, clock)
        finally:
            running.should_exit = True
            thread.join(timeout=30)
            analyzer.stop()


def _place(site: Site, device: str) -> str:
    """``device`` placed an hour ago at an address of its own: its live URL."""
    with CaseFile(site.db) as store:
        address = store.add_address(f"{device} Elm St", OFFICER)
        placement = store.place_device(address, device, time.time_ns() - 3600 * NS, OFFICER)
    return f"/addresses/{address}/placements/{placement}"


def _clap_check(site: Site, device: str, configured_deg: float) -> int:
    """``bearing-check --expected 250`` on the sensor ``device``, whose array (a UMA-8) hangs
    at 45 degrees and is configured at ``configured_deg``: three claps from 250 degrees."""
    recording = site.root / f"{device}.wav"
    soundfile.write(recording, claps_as_plane_wave(ArraySettings(preset="uma8",
                    orientation_deg=45.0), 250.0), RATE, subtype="FLOAT")  # fmt: skip
    config = site.root / f"{device}.toml"
    config.write_text(f'device_id = "{device}"\n[audio]\nsample_rate = {RATE}\nchannel = 0\n'
                      f'[array]\npreset = "uma8"\norientation_deg = {configured_deg}\n'
                      f"[mqtt]\nport = {site.services.broker.port}\n")
    return main(["bearing-check", "--config", str(config), "--expected", "250", "--input",
                 str(recording)])


def _stored(site: Site, device: str) -> list[dict[str, object]]:
    series = InfluxClient(InfluxSettings(url=site.services.influx.url)).query(
        f"SELECT * FROM bearing_check WHERE device = '{device}'")
    return [dict(zip(s["columns"], v, strict=True)) for s in series for v in s["values"]]


def _live(site: Site, url: str) -> dict[str, str]:
    site.clock.now = time.time_ns()  # after the check: the field check reads it
    browser = Browser(site.base)
    browser.sign_in()
    status, _, body = browser.request(url + "/live")
    assert status == 200, body
    return dict(json.loads(body))


def test_a_turned_array_fails_on_the_sensor_and_the_field_check_shows_the_fix(
        site: Site) -> None:
    url = _place(site, "yard-turned")
    assert _clap_check(site, "yard-turned", configured_deg=135.0) == 1
    wait_until(lambda: bool(_stored(site, "yard-turned")), 60, "the check in InfluxDB")
    live = _live(site, url)
    assert live["bearing_check_verdict"] == "failed"
    assert live["bearing_check"].startswith(
        "FAILED: measured 340° against 250° expected (off by +90°, tolerance 15°; 3 of 3 "
        "clap(s) with a bearing)")
    assert "set [array] orientation_deg = 45 or turn the array" in live["bearing_check"]


def test_the_stored_check_holds_each_claps_bearing_and_the_verdict(site: Site) -> None:
    _place(site, "yard-stored")
    assert _clap_check(site, "yard-stored", configured_deg=45.0) == 0
    wait_until(lambda: bool(_stored(site, "yard-stored")), 60, "the check in InfluxDB")
    [row] = _stored(site, "yard-stored")
    assert (row["passed"], row["expected_deg"], row["claps"], row["claps_with_bearing"]) == (
        True, 250.0, 3, 3)
    assert abs(float(row["measured_deg"]) - 250.0) < 3.0  # type: ignore[arg-type]
    clap_bearings = json.loads(str(row["clap_bearings"]))
    assert [round(at, 1) for at, _, _, _ in clap_bearings] == [1.0, 2.7, 4.4]
    assert all(abs(bearing - 250.0) < 3.0 for _, bearing, _, _ in clap_bearings)


def test_the_devices_page_shows_the_check_as_its_live_poll_does(site: Site) -> None:
    url = _place(site, "yard-page")
    assert _clap_check(site, "yard-page", configured_deg=45.0) == 0
    wait_until(lambda: bool(_stored(site, "yard-page")), 60, "the check in InfluxDB")
    live = _live(site, url)
    assert live["bearing_check"].startswith("passed: measured 250° against 250° expected")
    browser = Browser(site.base)
    browser.sign_in()
    _, _, page = browser.request(url.rsplit("/placements", 1)[0] + "/devices")
    shown = re.search(r'<dd data-field="bearing_check"[^>]*class="ok">([^<]*)<', page)
    assert shown and shown.group(1) == live["bearing_check"].replace("'", "&#39;")


def test_a_device_never_checked_is_told_how_to_check_it(site: Site) -> None:
    url = _place(site, "yard-unchecked")
    live = _live(site, url)
    assert live["bearing_check_verdict"] == "none"
    assert live["bearing_check"].startswith("not checked yet") and "bearing-check" in live[
        "bearing_check"]


def test_a_malformed_check_is_refused_counted_and_the_next_one_stored(site: Site) -> None:
    analyzer = site.analyzer
    refused_before = analyzer.counters.bearing_check_malformed
    forged = json.dumps({"v": 1, "device_id": "yard-bad", "passed": True}).encode()
    client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
    client.connect("127.0.0.1", site.services.broker.port)
    client.loop_start()
    try:
        for payload in (forged, b"\xff not json", b"{}" + b" " * 5000):
            client.publish(bearing_check_topic("yard-bad"), payload, qos=1,
                           retain=True).wait_for_publish(timeout=10)
    finally:
        client.disconnect()
        client.loop_stop()
    wait_until(lambda: analyzer.counters.bearing_check_malformed == refused_before + 3, 60,
               "three refused checks")
    assert _stored(site, "yard-bad") == []
    _place(site, "yard-bad")
    assert _clap_check(site, "yard-bad", configured_deg=45.0) == 0
    wait_until(lambda: bool(_stored(site, "yard-bad")), 60, "the good check in InfluxDB")
    assert analyzer.failure is None and analyzer.counters.bearing_check_malformed == (
        refused_before + 3)
