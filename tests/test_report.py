"""Evidence links and the officer's report through a real InfluxDB filled as the live
analyzer fills it: linking, the PDF's text and plots, tampering, redaction, Chromium."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from html import escape
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from influxdb_client import Point, WritePrecision

from analyzer.cases import CaseFile, format_time, parse_local_time
from analyzer.cli.main import main
from analyzer.deploy.services import Services
from analyzer.detect import DogEvent
from analyzer.ordinance import RuleEvent
from analyzer.reports import PLOT_TITLES
from analyzer.store import InfluxClient, InfluxSettings, event_point
from tests.live_replay import store_as_live
from tests.review_scene import LONE_BARKS

NS = 1_000_000_000
DEV = "glencoe-0007"
OTHER = "glencoe-0008"  # measuring elsewhere: never linked to this address
T0 = parse_local_time("2026-06-01 20:00")
TOTAL_S = 6500
COMPLAINANT, CONTACT = "Ann Neighbour", "555-0101"


def bark(device: str, t: int) -> RuleEvent:
    return RuleEvent(device, T0 + t * NS, T0 + t * NS + NS, "bark", 0.93, 68.0, 80.5,
                     "yamnet-head-1", plainly_audible=True, audibility_margin_db=9.5,
                     level_at_100ft_db=41.2, uncertainty_db=3.2, audibility_score=0.9)


def replay_into(client: InfluxClient, device: str) -> None:
    """8 min of a bark every 20 s, then 75 min of a bark every 5 min, stored second by second
    as the live analyzer stores them (levels, events, then the sealed windows)."""
    barks = sorted({*range(0, 481, 20), *range(1200, 5701, 300)})
    events = [bark(device, t) for t in barks]

    def level(second: int, time_ns: int) -> Point:
        return (Point("level").tag("device", device).field("seq", second)
                .field("laeq_db", 70.0 if second in barks else 42.0)
                .field("calibration_date", "2026-05-20").field("full_scale_db", 120.0)
                .field("max_dog_score", 0.9 if second in barks else 0.05)
                .time(time_ns, WritePrecision.NS))

    store_as_live(client, device, events, T0, TOTAL_S, level, settings=LONE_BARKS)


@dataclass
class Scene:
    influx_url: str
    db: Path
    complaint: int
    client: InfluxClient


def cli(scene: Scene, *args: str) -> int:
    return main([*args, "--db", str(scene.db), "--influx-url", scene.influx_url])


def build_scene(root: Path, services: Services) -> Scene:
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    client.create_database()
    replay_into(client, DEV)
    replay_into(client, OTHER)
    db = root / "cases.sqlite"
    with CaseFile(db) as store:
        address = store.add_address("12 Elm St", "Ofc. Lund", owner_name="R. Owner")
        store.place_device(address, DEV, T0 - 86400 * NS, "Ofc. Lund")
        store.open_complaint(address, "Cy Earlier", "555-0100", T0 - 86400 * NS,
                             T0 - 87000 * NS, T0 - 86000 * NS, True, "Ofc. Lund")
        complaint = store.open_complaint(address, COMPLAINANT, CONTACT, T0 + 600 * NS,
                                         T0 - 300 * NS, T0 + 1800 * NS, True, "Ofc. Lund")
        store.add_contact_attempt(complaint, T0 + 900 * NS, "door", "no_answer", "Ofc. Lund")
    return Scene(services.influx.url, db, complaint, client)


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("report")
    with Services(root / "services") as services:
        built = build_scene(root, services)
        assert cli(built, "case", "link", str(built.complaint), "--officer", "Ofc. Lund") == 0
        yield built


def pdf_text(path: Path) -> str:
    return subprocess.run(["pdftotext", str(path), "-"], capture_output=True,
                          text=True, check=True, timeout=60).stdout


def test_link_finds_the_address_devices_windows_that_cover_the_span(scene: Scene) -> None:
    with CaseFile(scene.db) as store:
        links = store.links(scene.complaint)
        audit = store.audit(scene.complaint)
    assert [(k.device_id, k.rule, k.start_ns) for k in links] == [
        (DEV, "continuous", T0), (DEV, "intermittent", T0 + 1200 * NS)]
    stored = scene.client.query(f"SELECT digest FROM evidence_window WHERE device = '{DEV}' "
                                "ORDER BY time ASC")[0]["values"]
    assert [k.digest for k in links] == [digest for _, digest in stored]
    assert [e.action for e in audit].count("link evidence window") == 2


def test_linking_again_adds_nothing(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(scene, "case", "link", str(scene.complaint), "--officer", "Ofc. Lund") == 0
    assert "0 window(s) linked, 2 in all" in capsys.readouterr().out


def test_the_pdf_states_each_findings_span_and_digest_and_holds_every_plot(
        scene: Scene, tmp_path: Path) -> None:
    assert cli(scene, "report", str(scene.complaint), "--out", str(tmp_path)) == 0
    pdf = tmp_path / f"complaint-{scene.complaint}.pdf"
    text = " ".join(pdf_text(pdf).split())
    with CaseFile(scene.db) as store:
        links = store.links(scene.complaint)
    for link in links:
        assert f"{format_time(link.start_ns)} to {format_time(link.end_ns)}" in text
        assert link.digest[:32] in text.replace(" ", "")
    assert "2 of 2 linked evidence window(s) verify now" in text
    assert COMPLAINANT in text and "Contains personal data" in text
    listing = subprocess.run(["pdfimages", "-list", str(pdf)], capture_output=True, text=True,
                             check=True, timeout=60).stdout.splitlines()[2:]
    images = [row for row in listing if row.split()[2] == "image"]  # not their alpha masks
    assert len(images) == len(PLOT_TITLES) * len(links)
    for number in range(1, len(links) + 1):  # each plot's caption, saying what to read
        for letter in "abcd"[:len(PLOT_TITLES)]:
            assert f"Figure 3.{number}{letter}. Read: " in text
    html = (tmp_path / f"complaint-{scene.complaint}.html").read_text()
    assert html.count("src='data:image/png;base64,") == len(PLOT_TITLES) * len(links)
    for title in PLOT_TITLES:
        assert html.count(f"<img alt='{escape(title)}'") == len(links)
    assert "src='http" not in html and "<script" not in html  # one self-contained file
    assert (pdf.stat().st_mode & 0o777) == 0o600


def test_the_redacted_export_withholds_the_complainant(scene: Scene, tmp_path: Path) -> None:
    assert cli(scene, "case", "export", str(scene.complaint), "--out", str(tmp_path),
               "--redact") == 0
    html = (tmp_path / f"complaint-{scene.complaint}-redacted.html").read_text()
    text = pdf_text(tmp_path / f"complaint-{scene.complaint}-redacted.pdf")
    for document in (html, text):
        assert COMPLAINANT not in document and CONTACT not in document
        assert "Cy Earlier" not in document
        assert "[withheld]" in document


def test_the_html_renders_in_headless_chromium(scene: Scene, tmp_path: Path) -> None:
    assert cli(scene, "report", str(scene.complaint), "--out", str(tmp_path)) == 0
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", f"--screenshot={shot}", "--window-size=1000,1400",
                    (tmp_path / f"complaint-{scene.complaint}.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    pixels = matplotlib.image.imread(shot)[..., :3]
    dark = np.mean(pixels.mean(axis=2) < 0.5)  # text and rules: not a blank page
    assert 0.005 < dark < 0.5, dark


def test_a_tampered_stored_event_makes_the_report_say_the_window_no_longer_verifies(
        tmp_path: Path, services: Services) -> None:
    scene = build_scene(tmp_path, services)
    assert cli(scene, "case", "link", str(scene.complaint), "--officer", "Ofc. Lund") == 0
    altered = bark(DEV, 100)  # an event inside the 8-minute episode, 6 dB louder afterwards
    scene.client.write_lines([event_point(DogEvent(
        DEV, altered.onset_ns, altered.offset_ns, "bark", altered.confidence,
        altered.laeq_db + 6.0, altered.lafmax_db, altered.model_version)).to_line_protocol()])
    out = tmp_path / "report"
    assert cli(scene, "report", str(scene.complaint), "--out", str(out)) == 0
    text = " ".join(pdf_text(out / f"complaint-{scene.complaint}.pdf").split())
    assert "the evidence window no longer verifies (does not verify)" in text
    assert "1 of 2 linked evidence window(s) verify now" in text
