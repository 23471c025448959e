"""The finding page's plot as Chromium draws it (issue 35, item 6): the rule's progress on round
ticks (0, 2, 4, 6, 8 min, so the 7-min line sits where it belongs), time ticks at an even clock
step with every label inside the plot, events shaded by audibility. The server, InfluxDB and
browser are tests/test_review_browser.py's (``site``, ``browser``); a screenshot goes to
$BARKWATCH_TEST_ARTIFACTS/review/plot-ticks.png."""

from __future__ import annotations

import re

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from analyzer.cases import CaseFile
from tests import test_review_browser as shared
from tests.test_review_browser import Site, artifacts, sign_in, wait_for

browser, site = shared.browser, shared.site  # its module's fixtures, used here by name

VIEWBOX_WIDTH = 1000
PROGRESS_PANEL = (400, 525)  # finding.js PANELS.progress, its labels' baselines inside


def test_the_findings_plot_has_round_ticks_inside_it(browser: WebDriver, site: Site) -> None:
    browser.delete_all_cookies()
    sign_in(browser, site)
    wait_for(browser, "#sign-out")
    with CaseFile(site.case.db) as store:
        continuous = store.links(site.case.complaint)[0]  # 8 min of barking
    assert continuous.rule == "continuous"
    browser.get(f"{site.base}/cases/{site.case.complaint}/findings/{continuous.id}")
    WebDriverWait(browser, 30).until(
        lambda d: "interval" in d.find_element(By.ID, "plot-status").text)
    ticks = browser.execute_script("""
        const out = { value: [], time: [] };
        for (const t of document.querySelectorAll('#plot-svg text.value-tick')) {
          out.value.push([t.textContent, Number(t.getAttribute('y'))]); }
        for (const t of document.querySelectorAll('#plot-svg text.time-tick')) {
          const box = t.getBBox();
          out.time.push([t.textContent, Number(t.getAttribute('x')), box.x, box.x + box.width]);
        }
        return out;""")
    browser.save_screenshot(str(artifacts() / "plot-ticks.png"))
    lo, hi = PROGRESS_PANEL
    assert [label for label, y in ticks["value"] if lo <= y <= hi] == ["0", "2", "4", "6", "8"]
    labels = [label for label, *_ in ticks["time"]]
    assert len(labels) >= 4 and all(re.fullmatch(r"\d\d:\d\d", label) for label in labels)
    minutes = [int(label[:2]) * 60 + int(label[3:]) for label in labels]
    steps = {b - a for a, b in zip(minutes, minutes[1:], strict=False)}
    assert len(steps) == 1 and steps.pop() in (1, 2, 5, 10)  # one round step of the clock
    xs = [x for _, x, *_ in ticks["time"]]
    gaps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
    assert max(gaps) - min(gaps) < 0.5  # evenly spaced on the axis
    assert all(left >= 0 and right <= VIEWBOX_WIDTH for *_, left, right in ticks["time"])
    assert browser.find_elements(By.CSS_SELECTOR, "#plot-svg rect.event.audible")
    assert browser.find_elements(By.CSS_SELECTOR, "#plot-svg pattern#hatch-unassessed")
