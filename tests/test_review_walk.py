"""A complaint walked from opening to disposition in a real browser (issue 35), on a desk and
on a 390 px phone: an administrator adds the address, an officer opens the complaint from the
overview, places a device, links the findings, records a contact attempt, attests conditions
4-7, records the disposition and reads the overview again. Headless Chromium (Selenium) against
the real server, InfluxDB and case file of tests/test_review_browser.py; every page checked
for sideways overflow on the phone; screenshots to the artifacts folder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from analyzer.cases import ADMINISTRATOR, CaseFile, add_account, find_account
from analyzer.review import hash_password
from tests.review_scene import DEVICE
from tests.test_review_browser import PASSWORD, USER, Site, artifacts, chrome, site, wait_for

__all__ = ["site"]  # the module-scoped server fixture, one for this module
ADMIN = "ada"
PHONE_WIDTH = 390


@pytest.fixture(scope="module", params=["desk", "phone"])
def browser(request: pytest.FixtureRequest) -> Iterator[tuple[WebDriver, str]]:
    driver = chrome(PHONE_WIDTH if request.param == "phone" else None)
    try:
        yield driver, request.param
    finally:
        driver.quit()


class Walk:
    """One browser's walk: pages checked for overflow on the phone, each one photographed."""

    def __init__(self, driver: WebDriver, kind: str, site: Site) -> None:
        self.driver, self.kind, self.site, self.step = driver, kind, site, 0

    def page(self, css: str, name: str) -> None:
        """Wait for ``css``; on the phone, nothing may be wider than the screen; a shot."""
        wait_for(self.driver, css)
        if self.kind == "phone":
            width = self.driver.execute_script(
                "return [document.documentElement.scrollWidth, window.innerWidth]")
            wide = self.driver.execute_script(
                "return [...document.querySelectorAll('main > *, main > * > *')].filter(e => "
                f"e.getBoundingClientRect().right > {PHONE_WIDTH + 1}).slice(0, 8).map(e => "
                "e.tagName + '#' + e.id + '.' + e.className + ' ' + "
                "Math.round(e.getBoundingClientRect().right))")
            assert width[0] <= width[1] == PHONE_WIDTH, f"{name}: {width[0]} px wide: {wide}"
        self.step += 1
        self.driver.save_screenshot(str(artifacts() / f"walk-{self.kind}-{self.step:02d}-"
                                        f"{name}.png"))

    def sign_in(self, username: str) -> None:
        self.driver.delete_all_cookies()
        self.driver.get(self.site.base + "/signin")
        self.driver.find_element(By.ID, "username").send_keys(username)
        self.driver.find_element(By.ID, "password").send_keys(PASSWORD)
        self.driver.find_element(By.ID, "sign-in").click()
        self.page("#devices-now", f"overview-{username}")

    def fill(self, form_id: str, fields: dict[str, str], choices: dict[str, str]) -> None:
        form = self.driver.find_element(By.ID, form_id)
        for name, value in fields.items():
            element = form.find_element(By.NAME, name)
            element.clear()
            element.send_keys(value)
        for name, value in choices.items():
            Select(form.find_element(By.NAME, name)).select_by_value(value)
        self.submit(form.find_element(By.CSS_SELECTOR, "button[type=submit]"))

    def submit(self, button: WebElement) -> None:
        """Click and wait for the next page (a marker on this one is gone, the new one loaded)."""
        self.driver.execute_script("window.walkMarker = true")
        button.click()
        WebDriverWait(self.driver, 30).until(lambda d: d.execute_script(
            "return window.walkMarker === undefined && document.readyState === 'complete'"))

    def flash(self) -> str:
        wait_for(self.driver, "#flash")
        return str(self.driver.find_element(By.ID, "flash").text)


def test_a_complaint_from_opening_to_disposition(browser: tuple[WebDriver, str],
                                                 site: Site) -> None:
    driver, kind = browser
    walk = Walk(driver, kind, site)
    premises = f"{kind.title()} Walk 5"
    with CaseFile(site.case.db) as store:
        if find_account(store, ADMIN) is None:  # the first browser makes it
            add_account(store, ADMIN, "Adm. Ada", hash_password(PASSWORD), "setup",
                        ADMINISTRATOR)
    walk.sign_in(ADMIN)
    driver.find_element(By.ID, "nav-addresses").click()
    walk.page("#form-address", "addresses")
    walk.fill("form-address", {"premises": premises, "owner": "R. Keeper"}, {})
    assert walk.flash().startswith("Added address #")
    walk.page("#addresses", "address-added")

    walk.sign_in(USER)
    driver.find_element(By.ID, "nav-new-complaint").click()
    walk.page("#form-complaint", "new-complaint")
    form = {"complainant": "Bo Nextdoor", "contact": "bo@example.org",
            "received": "2026-06-01 20:50", "span_start": "2026-06-01 19:55",
            "span_end": "2026-06-01 20:30", "note": "barking and howling"}
    driver.find_element(By.CSS_SELECTOR, "input[name=contemporaneous][value=yes]").click()
    walk.fill("form-complaint", {**form, "span_end": "2026-06-01 19:00"},
              {"address": str(site.case.address), "role": "resident"})
    walk.page("#form-error", "complaint-refused")
    assert "ends before it starts" in driver.find_element(By.ID, "form-error").text
    assert driver.find_element(By.NAME, "complainant").get_attribute("value") == "Bo Nextdoor"
    assert driver.find_element(By.CSS_SELECTOR, "input[name=contemporaneous][value=yes]"
                               ).is_selected()
    walk.fill("form-complaint", {"span_end": form["span_end"]}, {})
    assert walk.flash().startswith("Opened complaint #")
    walk.page("#checklist", "case-opened")
    complaint = int(driver.current_url.rsplit("/", 1)[1].split("#")[0])

    walk.submit(driver.find_element(By.ID, "link-findings"))
    assert "Linked 2 finding(s)" in walk.flash()
    walk.page("#findings-table", "findings-linked")
    walk.fill("form-contact", {"method": "door", "note": "nobody answered"},
              {"outcome": "ignored"})
    assert walk.flash().startswith("Recorded contact attempt")
    for condition, note in (("4", "two visits, a card left"), ("5", "dog in the yard"),
                            ("6", "owner unreachable"), ("7", "notice on the gate")):
        walk.fill("form-attestation", {"note": note}, {"condition": condition})
        assert walk.flash().startswith("Recorded attestation")
    states = [row.find_elements(By.TAG_NAME, "td")[3].text
              for row in driver.find_elements(By.CSS_SELECTOR, "#checklist tr")[1:]]
    assert states[3:] == ["met"] * 4, states
    walk.page("#attestations", "attested")
    walk.fill("form-disposition", {"note": "first warning"}, {"kind": "warning"})
    assert walk.flash().startswith("Recorded disposition")
    walk.page("#dispositions", "disposed")

    driver.get(f"{site.base}/addresses/{site.case.address}/devices")
    walk.page(".field-check", "field-check")
    assert driver.find_element(By.CSS_SELECTOR, "h2.device").text == DEVICE
    assert "synchronised" in driver.find_element(By.CSS_SELECTOR, ".field-check").text
    driver.find_element(By.ID, "nav-overview").click()
    walk.page("#open-case-list", "overview-after")
    open_cases = driver.find_element(By.ID, "open-case-list").text
    assert f"#{complaint}" not in open_cases  # disposed: no longer open
    with CaseFile(site.case.db) as store:
        actions = [e.action for e in store.audit(complaint)]
    assert actions.count("link evidence window") == 2
    assert [a for a in actions if a.startswith("attest")] == [
        f"attest condition {n}" for n in (4, 5, 6, 7)]
    assert "record disposition" in actions and "record contact attempt" in actions
