"""Event review in a real browser (issue 35, item 2): headless Chromium rejects the first barks
of the continuous finding on its page until the episode is seven minutes or less, and reads the
finding judged again. The server, InfluxDB, case file and browser of
tests/test_review_browser.py; a screenshot goes to $BARKWATCH_TEST_ARTIFACTS/review."""

from __future__ import annotations

from selenium.common.exceptions import JavascriptException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from analyzer.cases import CaseFile
from tests.review_scene import T0
from tests.test_review_browser import OFFICER, Site, browser, shot, sign_in, site, wait_for

__all__ = ["browser", "site"]  # the module-scoped fixtures, one of each for this module

NS = 1_000_000_000


def _class_of(driver: WebDriver, element_id: str) -> str:
    """The class attribute of the element with this id now ('' while there is none)."""
    found = driver.execute_script(
        "const e = document.getElementById(arguments[0]); return e ? e.className : '';",
        element_id)
    return str(found or "")


def _rejudged(driver: WebDriver) -> list[str]:
    row = driver.find_element(By.ID, "sensitivity-rejudged")
    return [" ".join(cell.text.split()) for cell in row.find_elements(By.TAG_NAME, "td")]


def test_an_officer_rejects_barks_and_reads_that_the_finding_no_longer_holds(
        browser: WebDriver, site: Site) -> None:
    browser.delete_all_cookies()
    sign_in(browser, site)
    wait_for(browser, "#sign-out")
    finding = f"{site.base}/cases/{site.case.complaint}/findings/1"
    browser.get(finding)
    wait_for(browser, "#event-table")
    assert _rejudged(browser)[:2] == ["Without the 0 rejected events", "still met"]
    for t_s in (0, 20, 40, 60):
        row = browser.find_element(By.ID, f"event-{T0 + t_s * NS}-bark")
        Select(row.find_element(By.NAME, "verdict")).select_by_value("rejected")
        row.find_element(By.NAME, "reason").send_keys(f"a door slamming at {t_s} s")
        row.find_element(By.TAG_NAME, "button").click()
        # the page reloads under the wait: one script call reads the row's class, so no element
        # of the old page is held across the reload (Chromium answers "Node with given id does
        # not belong to the document"); a script run while the page unloads is tried again
        WebDriverWait(browser, 30, ignored_exceptions=(JavascriptException,)).until(
            lambda d, t=t_s: "rejected" in _class_of(d, f"event-{T0 + t * NS}-bark"))
    assert browser.current_url == finding + "#events"
    assert "Recorded verdict #" in browser.find_element(By.ID, "flash").text
    what, met, longest, counted = _rejudged(browser)
    assert (what, met, counted) == ("Without the 4 rejected events", "not met", "21")
    assert longest.startswith("401.0 s (6.7 min)")
    row = browser.find_element(By.ID, f"event-{T0 + 60 * NS}-bark")
    assert "a door slamming at 60 s" in row.text and OFFICER in row.text
    with CaseFile(site.case.db) as store:
        actions = [(e.actor, e.action) for e in store.audit() if e.entity == "event_verdicts"]
    assert actions == [(OFFICER, "rejected event")] * 4
    shot(browser, "20-finding-events-rejudged")
