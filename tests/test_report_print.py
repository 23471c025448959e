"""The report as an officer prints it (issue 35, items 5 and 6): on US Letter unless the
configuration says A4, no word broken across lines, every count complete, the uncalibrated
default and the chain's first window said in words, captions that say what to read; plots
with round ticks, and audibility shading that stays apart in grey.

The PDF is read back with pdftotext and pdfinfo (poppler-utils), from a report made over a
real InfluxDB filled as the live analyzer fills it (tests/live_replay.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from influxdb_client import Point, WritePrecision

from analyzer.cases import CaseFile
from analyzer.cli.main import main
from analyzer.deploy.services import Services
from analyzer.ordinance import RuleEvent
from analyzer.reports.paper import ReportSettings, page_css
from analyzer.reports.pdf import ReportJob, report_document
from analyzer.reports.plots import AUDIBLE, NOT_ASSESSED, NOT_AUDIBLE, levels_figure
from analyzer.reports.ticks import nice_step, nice_ticks
from analyzer.review.settings import load_review_settings
from analyzer.store import InfluxClient, InfluxSettings
from sensor.errors import ConfigError
from tests.live_replay import store_as_live
from tests.review_scene import DEVICE, NS, T0, file_case

ROOT = Path(__file__).resolve().parent.parent
FINDING_JS = ROOT / "analyzer" / "review" / "static" / "finding.js"
REVIEW_CSS = ROOT / "analyzer" / "review" / "static" / "review.css"
LETTER_PT, A4_PT = (612.0, 792.0), (595.276, 841.89)

# Two continuous episodes, 8 min each of a bark every 10 s (49 events), 12 min apart. In each,
# events 3, 10, 17, ... (7 of them) were judged not plainly audible at 100 ft and 5 and 12 not
# assessed, so 40 of the 49 were plainly audible. The first episode lost 5 s of frames.
EPISODES_S = (0, 1200)
NOT_AUDIBLE_AT = {3, 10, 17, 24, 31, 38, 45}
NOT_ASSESSED_AT = {5, 12}
MISSING_S = range(200, 205)
SECONDS = 1900


def bark(t_s: int, index: int) -> RuleEvent:
    if index in NOT_ASSESSED_AT:
        return RuleEvent(DEVICE, T0 + t_s * NS, T0 + t_s * NS + NS, "bark", 0.93, 68.0, 80.5,
                         "yamnet-head-1")
    audible = index not in NOT_AUDIBLE_AT
    return RuleEvent(DEVICE, T0 + t_s * NS, T0 + t_s * NS + NS, "bark", 0.93, 68.0, 80.5,
                     "yamnet-head-1", plainly_audible=audible,
                     audibility_margin_db=9.5 if audible else -2.0, level_at_100ft_db=41.2,
                     uncertainty_db=3.2, audibility_score=0.9 if audible else 0.2)


def uncalibrated_level(second: int, time_ns: int) -> Point | None:
    """A second of a sensor never calibrated: no calibration date, the default full scale."""
    if second in MISSING_S:
        return None
    return (Point("level").tag("device", DEVICE).field("seq", second)
            .field("laeq_db", 42.0).field("lafmax_db", 45.0)
            .field("calibration_date", "").field("full_scale_db", 120.0)
            .field("max_dog_score", 0.05).time(time_ns, WritePrecision.NS))


@dataclass
class Printed:
    """The report on Letter (``barkwatch report``) and on A4 (the review app's [report])."""

    db: Path
    complaint: int
    html: str
    a4_html: str
    letter_pdf: Path
    a4_pdf: Path
    a4_cli_pdf: Path


def cli(influx_url: str, db: Path, *args: str) -> int:
    return main([*args, "--db", str(db), "--influx-url", influx_url])


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Printed]:
    root = tmp_path_factory.mktemp("print")
    with Services(root / "services") as services:
        client = InfluxClient(InfluxSettings(url=services.influx.url))
        client.create_database()
        events = [bark(start + 10 * i, i) for start in EPISODES_S for i in range(49)]
        assert store_as_live(client, DEVICE, events, T0, SECONDS, uncalibrated_level) == 2
        case = file_case(root / "cases.sqlite", client)
        assert case.links == 2
        url = services.influx.url
        assert cli(url, case.db, "report", str(case.complaint), "--out", str(root / "l")) == 0
        assert cli(url, case.db, "report", str(case.complaint), "--out", str(root / "a"),
                   "--paper", "a4") == 0
        config = root / "review.toml"
        config.write_text(f'cases_db = "{case.db}"\n[influx]\nurl = "{url}"\n'
                          '[report]\npaper = "a4"\n')
        settings = load_review_settings(str(config))
        job = ReportJob(settings.cases_db, case.complaint, settings.influx, T0 + 7200 * NS,
                        paper=settings.report.paper)
        a4 = root / "review-a4.pdf"
        a4.write_bytes(report_document(job))
        name = f"complaint-{case.complaint}"
        yield Printed(case.db, case.complaint, (root / "l" / f"{name}.html").read_text(),
                      (root / "a" / f"{name}.html").read_text(), root / "l" / f"{name}.pdf",
                      a4, root / "a" / f"{name}.pdf")


def pdf_text(pdf: Path) -> str:
    return subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def page_sizes_pt(pdf: Path) -> set[tuple[float, float]]:
    """Every page's size in points (pdfinfo -l)."""
    info = subprocess.run(["pdfinfo", "-f", "1", "-l", "999", str(pdf)], capture_output=True,
                          text=True, check=True, timeout=60).stdout
    return {(float(w), float(h)) for w, h in
            re.findall(r"Page +\d+ size: +([\d.]+) x ([\d.]+) pts", info)}


class _Text(HTMLParser):
    """The text a reader sees in the report's HTML, with a space at every block's edge."""

    BLOCKS = {"td", "th", "tr", "div", "p", "li", "h1", "h2", "h3", "br", "figcaption",
              "blockquote", "ol", "table", "tbody", "thead"}

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.skip += tag in ("style", "title")
        if tag in self.BLOCKS:
            self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        self.skip -= tag in ("style", "title")
        if tag in self.BLOCKS:
            self.parts.append(" ")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def html_words(html: str) -> Counter[str]:
    parser = _Text()
    parser.feed(html)
    return Counter("".join(parser.parts).split())


def plain(html: str) -> str:
    """The text of an HTML fragment."""
    return unescape(re.sub(r"<[^>]+>", "", html))


def may_break(word: str) -> bool:
    """Digests (64 hex digits, in their .mono cells) may wrap anywhere."""
    return bool(re.search(r"[0-9a-f]{32}", word))


# --- ticks ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("lo", "hi", "most", "ticks"), [
    (0.0, 8.4, 6, [0, 2, 4, 6, 8]),          # issue 35: the 7-min axis read 0 / 4 / 8
    (-0.4, 8.4, 5, [0, 2, 4, 6, 8]),         # the review plot's padded progress axis
    (0.0, 75.02, 6, [0, 20, 40, 60]),        # the intermittent rule's 60 min on a tick
    (0.0, 60.0, 7, [0, 10, 20, 30, 40, 50, 60]),
    (37.0, 75.0, 6, [40, 50, 60, 70]),
    (0.0, 0.3, 6, [0, 0.1, 0.2, 0.3]),       # rounded: never 0.30000000000000004
    (-3.0, 3.0, 6, [-2, 0, 2]),
    (0.0, 1e6, 6, [0, 2e5, 4e5, 6e5, 8e5, 1e6]),
])
def test_nice_ticks_are_round_and_evenly_spaced(lo: float, hi: float, most: int,
                                                ticks: list[float]) -> None:
    assert nice_ticks(lo, hi, most) == ticks


def test_the_step_is_one_two_or_five_times_a_power_of_ten() -> None:
    assert [nice_step(span, 6) for span in (8.4, 0.84, 84.0, 11.0, 29.0, 31.0)] == [
        2.0, 0.2, 20.0, 2.0, 5.0, 10.0]
    with pytest.raises(ValueError, match="positive"):
        nice_step(0.0, 6)


def node(script: str) -> object:
    """Run ``script`` in Node.js with the review plot's functions as ``plot``; its JSON."""
    path = shutil.which("node") or shutil.which("nodejs")
    assert path, "Node.js runs the review plot's tick functions (scripts/bootstrap.sh dev)"
    code = f"const plot = require({json.dumps(str(FINDING_JS))});\n" \
           f"process.stdout.write(JSON.stringify({script}));"
    result = subprocess.run([path, "-e", code], capture_output=True, text=True, timeout=60,
                            check=True)
    return json.loads(result.stdout)


def test_the_review_plot_chooses_the_same_ticks_as_the_report() -> None:
    axes = [(0.0, 8.4, 6), (-0.4, 8.4, 5), (0.0, 75.02, 6), (37.0, 75.0, 6), (0.0, 0.3, 6),
            (-3.0, 3.0, 6), (38.6, 73.4, 5), (0.0, 1.0, 5)]
    js = node("[" + ", ".join(f"plot.niceTicks({lo}, {hi}, {most})" for lo, hi, most in axes)
              + "]")
    assert js == [nice_ticks(lo, hi, most) for lo, hi, most in axes]


def test_the_review_plot_puts_its_time_ticks_on_round_local_times_inside_the_axis() -> None:
    start_ms = T0 // 1_000_000  # 20:00:00 CDT
    cdt_ms = -5 * 3600 * 1000
    answer = node(
        f"[plot.timeTicks({start_ms - 17000}, {start_ms + 486000}, 8, {cdt_ms}),"
        f" plot.timeTicks({start_ms + 1234}, {start_ms + 75 * 60000}, 8, {cdt_ms}),"
        f" plot.timeTicks({start_ms}, {start_ms + 3 * 86400000}, 8, {cdt_ms})]")
    assert isinstance(answer, list)
    eight_minutes, hour_and_a_quarter, three_days = answer
    # 19:59:43 to 20:08:06: every 2 min from 20:00, none outside the axis
    assert eight_minutes == {"step_s": 120,
                             "ticks": [start_ms + k * 120000 for k in range(5)]}
    # 20:00:01 to 21:15: every 10 min from 20:10 (20:00 is before the axis starts)
    assert hour_and_a_quarter["step_s"] == 600
    assert hour_and_a_quarter["ticks"] == [start_ms + k * 600000 for k in range(1, 8)]
    # three days: every 12 h at local midnight and noon (05:00 and 17:00 UTC in summer)
    assert three_days["step_s"] == 43200
    assert [(t - start_ms) / 3600000 for t in three_days["ticks"]] == [4, 16, 28, 40, 52, 64]


# --- grey print ----------------------------------------------------------------------------

def grey_over_white(colour: str, alpha: float) -> float:
    """Luma (ITU-R BT.601) of ``colour`` laid at ``alpha`` over white, 0 black to 1 white."""
    r, g, b = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return 1 - alpha * (1 - (0.299 * r + 0.587 * g + 0.114 * b))


def test_the_report_plots_audibility_in_grey_levels_far_apart() -> None:
    from analyzer.cases.links import LinkCheck
    from analyzer.cases.records import EvidenceLink
    from analyzer.reports.gather import WindowEvidence

    # minute 1: plainly audible, minute 3: judged not, minute 5: not assessed, each 30 s long
    events = [RuleEvent(DEVICE, T0 + s * NS, T0 + (s + 30) * NS, "bark", 0.9, 60.0, 70.0, "m",
                        plainly_audible=audible)
              for s, audible in ((60, True), (180, False), (300, None))]
    link = EvidenceLink(1, 1, DEVICE, "continuous", T0, T0 + 420 * NS, "0" * 64, T0, "Ofc.")
    evidence = WindowEvidence(LinkCheck(link, "verified", [], {}), events,
                              [(T0 + s * NS, 40.0) for s in range(420)])
    figure = levels_figure(evidence)
    figure.canvas.draw()
    rgb = np.asarray(figure.canvas.buffer_rgba())[..., :3] / 255.0  # type: ignore[attr-defined]
    grey = rgb @ np.array([0.299, 0.587, 0.114])
    axes = figure.axes[0]
    height = rgb.shape[0]

    def shade(minute: float) -> np.ndarray:
        # a 10 x 10 pixel patch in the band a quarter up the axes (under the 40 dB line at
        # half-way, the legend at the top)
        x, _ = axes.transData.transform((minute, 40.0))
        _, y = axes.transAxes.transform((0.0, 0.25))
        row, col = int(height - y), int(x)
        return np.asarray(grey[row - 5:row + 5, col - 5:col + 5])

    audible, not_audible, not_assessed = shade(1.25), shade(3.25), shade(5.25)
    assert audible.mean() == pytest.approx(grey_over_white(*AUDIBLE[:2]), abs=0.03)
    assert not_audible.mean() == pytest.approx(grey_over_white(*NOT_AUDIBLE[:2]), abs=0.03)
    assert not_audible.mean() - audible.mean() > 0.5  # dark against light, without colour
    assert NOT_ASSESSED[2] and not_assessed.std() > 0.05  # hatched: a pattern, not a tint
    assert audible.std() < 0.01 and not_audible.std() < 0.01


def css_rule(css: str, selector: str) -> dict[str, str]:
    body = re.search(re.escape(selector) + r"\s*\{([^}]*)\}", css)
    assert body, selector
    return dict((k.strip(), v.strip()) for k, v in
                (d.split(":", 1) for d in body.group(1).split(";") if d.strip()))


def test_the_review_plot_shades_audibility_in_grey_levels_far_apart() -> None:
    css = REVIEW_CSS.read_text()
    audible = css_rule(css, "svg .event.audible")
    inaudible = css_rule(css, "svg .event.inaudible")
    dark = grey_over_white(audible["fill"], float(audible["fill-opacity"]))
    light = grey_over_white(inaudible["fill"], float(inaudible["fill-opacity"]))
    assert light - dark > 0.5, (dark, light)
    assert css_rule(css, "svg .event.unassessed")["fill"] == "url(#hatch-unassessed)"
    assert 'id: "hatch-unassessed"' in FINDING_JS.read_text()  # the pattern it names


# --- the printed report --------------------------------------------------------------------

def test_the_report_is_on_us_letter_by_default(printed: Printed) -> None:
    assert page_sizes_pt(printed.letter_pdf) == {LETTER_PT}


def test_the_report_is_on_a4_where_the_configuration_says_so(printed: Printed) -> None:
    assert page_sizes_pt(printed.a4_pdf) == {A4_PT}  # review app: [report] paper = "a4"
    assert page_sizes_pt(printed.a4_cli_pdf) == {A4_PT}  # barkwatch report --paper a4


def test_a_paper_size_not_offered_is_refused_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "review.toml"
    config.write_text('[report]\npaper = "legal"\n')
    with pytest.raises(ConfigError, match=r"config key 'report.paper': 'legal' is not one of "
                                          r"\['letter', 'a4'\]"):
        load_review_settings(str(config))
    with pytest.raises(ConfigError, match="config key 'report.paper': 'A5' is not a paper"):
        ReportSettings(paper="A5")
    assert page_css("letter").startswith("@page { size: letter;")


@pytest.mark.parametrize("paper", ["letter", "a4"])  # A4's page is the narrower
def test_no_word_is_broken_across_lines_in_the_pdf(printed: Printed, paper: str) -> None:
    html, pdf = ((printed.html, printed.letter_pdf) if paper == "letter" else
                 (printed.a4_html, printed.a4_cli_pdf))
    seen = html_words(html)
    printed_words = Counter(pdf_text(pdf).split())
    # each word of the HTML as often in the PDF: a word split over two lines
    # ("sho/wn/by/the/reco/rds", issue 35) reads as two other words there
    broken = {word: n - printed_words[word] for word, n in seen.items()
              if printed_words[word] < n and not may_break(word)}
    assert broken == {}
    assert seen["supported"] == 1 and seen["attest"] == 4  # the checklist's narrowest column


def test_the_html_keeps_the_narrow_columns_whole(printed: Printed) -> None:
    # set widths (no squeezing a column until a word breaks), and digests only in .mono
    assert "<table class='fixed '><colgroup><col style='width: 5%'>" in printed.html
    assert "<table class='fixed digests'>" in printed.html
    digests = re.findall(r"[0-9a-f]{64}", printed.html)
    marked = re.findall(r"<span class='mono'>([0-9a-f]{64})</span>", printed.html)
    assert digests and sorted(digests) == sorted(marked)


def text_of(pdf: Path) -> str:
    return " ".join(pdf_text(pdf).split())


def test_every_count_of_events_adds_up_to_the_events_in_the_span(printed: Printed) -> None:
    text = text_of(printed.letter_pdf)
    assert text.count("of the 49 events in the span, 40 plainly audible, 7 judged not plainly "
                      "audible and 2 not assessed") == 2


def test_coverage_is_said_plainly(printed: Printed) -> None:
    text = text_of(printed.letter_pdf)
    assert "5.0 s of the span not measured (1 coverage gap(s): " in text  # the first episode
    assert "no coverage gaps: every second of the span was measured" in text  # the second
    assert "0.0 s not measured" not in text


def test_the_uncalibrated_default_is_said_beside_the_levels_it_affects(
        printed: Printed) -> None:
    text = text_of(printed.letter_pdf)
    assert text.count("no calibration recorded (no calibration date stored): full scale 120 "
                      "dB SPL is the uncalibrated default a sensor assumes before its first "
                      "calibration, not a measurement of this microphone, so every absolute "
                      "level in this report rests on it: LAeq 68.0 dB") == 2
    assert text.count("LAeq 68.0 dB, LAFmax 80.5 dB over counted events (on the uncalibrated "
                      "default full scale of 120 dB SPL, no calibration recorded: see "
                      "Calibration)") == 2


def test_the_chains_first_window_is_explained(printed: Printed) -> None:
    text = text_of(printed.letter_pdf)
    assert text.count("(all zeros: the first window of this device's chain, no window before "
                      "it)") == 1  # the second window's previous digest is the first's
    with CaseFile(printed.db) as store:
        first, second = store.links(printed.complaint)
    unspaced = text.replace(" ", "")  # a digest may wrap anywhere in its .mono cell
    assert f"Digest{first.digest}<br>".replace("<br>", "Previousdigest" + "0" * 64) in unspaced
    assert f"Digest{second.digest}Previousdigest{first.digest}" in unspaced


def test_each_caption_says_what_to_read_with_the_windows_numbers(printed: Printed) -> None:
    text = text_of(printed.letter_pdf)
    for figure in ("3.1", "3.2"):
        for letter in "abcd":
            assert f"Figure {figure}{letter}. Read: " in text
    assert "here it passes 7 min at minute 7.0" in text
    assert "dark where it was plainly audible 100 ft beyond the boundary" in text
    assert "every minute has at least one" in text
    assert "the highest dot, the longest gap, is 9.0 s" in text  # 10 s apart, 1 s barks


UNCALIBRATED_LAEQ = (" (on the uncalibrated default full scale of 120 dB SPL, no calibration "
                     "recorded: see Calibration)")


@pytest.mark.parametrize(("dates", "calibration", "beside_laeq"), [
    (["2026-05-20"], "calibration date 2026-05-20; full scale 120 dB SPL (the level a signal "
     "at digital full scale reads, from that calibration)", ""),
    (["demo"], "no calibration recorded (calibration date stored as 'demo', not a date): full "
     "scale 120 dB SPL is the uncalibrated default", UNCALIBRATED_LAEQ),
    ([], "no calibration recorded (no calibration date stored): full scale 120 dB SPL is the "
     "uncalibrated default", UNCALIBRATED_LAEQ),
])
def test_the_calibration_is_read_from_the_dates_stored_with_the_levels(
        dates: list[str], calibration: str, beside_laeq: str) -> None:
    # as the review app's finding page builds it: the distinct dates and full scales only
    from analyzer.cases.links import LinkCheck
    from analyzer.cases.records import EvidenceLink
    from analyzer.reports import WindowEvidence, element_rows

    link = EvidenceLink(1, 1, DEVICE, "continuous", T0, T0 + 481 * NS, "0" * 64, T0, "Ofc.")
    fields = {"levels": {"laeq_db": "68.000000", "lafmax_db": "80.500000"}}
    rows = dict(element_rows(WindowEvidence(LinkCheck(link, "verified", [], fields), [], [],
                                            dates, [120.0])))
    assert plain(rows["Calibration"]).startswith(calibration)
    assert plain(rows["Levels at the sensor"]) == (
        "LAeq 68.0 dB, LAFmax 80.5 dB over counted events" + beside_laeq)


BROKEN_WORDS_JS = """
const broken = [];
for (const cell of document.querySelectorAll('table.fixed td, table.fixed th')) {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest('.mono')) continue;  // digests may wrap anywhere
    const words = /\\S+/g;
    for (let m = words.exec(node.data); m; m = words.exec(node.data)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (lines.size > 1) broken.push(m[0]);
    }
  }
}
const page = document.documentElement;
return [broken, document.querySelectorAll('table.fixed td').length,
        page.scrollWidth - page.clientWidth];
"""


@pytest.mark.parametrize("width_px", [390, 1280])  # a phone, a desk
def test_no_word_is_broken_across_lines_in_the_html(printed: Printed, tmp_path: Path,
                                                    width_px: int) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_path, "needs Debian's chromium and chromium-driver"
    page = tmp_path / "report.html"
    page.write_text(printed.html)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width_px, "height": 900, "deviceScaleFactor": 1,
            "mobile": width_px < 500})
        driver.get(page.as_uri())
        broken, cells, overflow_px = driver.execute_script(BROKEN_WORDS_JS)
    finally:
        driver.quit()
    assert cells > 40 and broken == []  # the checklist's and the digests' cells, read
    assert overflow_px == 0  # tables scroll inside their box, never the page
