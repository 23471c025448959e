"""Evidence review in a real browser: headless Chromium driven by Selenium (Debian's chromium
and chromium-driver) against the real server (uvicorn on a free loopback port) reading a real
InfluxDB and a case file. One browser for the module (each start costs seconds).

A screenshot of each page goes to $BARKWATCH_TEST_ARTIFACTS/review (default
tests/artifacts/review, git-ignored) for a person to look at.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from analyzer.cases import CaseFile
from analyzer.deploy.services import Services
from analyzer.review import ReviewSettings, hash_password, uvicorn_config
from analyzer.store import InfluxSettings
from tests.review_scene import (
    COMPLAINANT,
    Case,
    evidence_with_case,
)

ROOT = Path(__file__).resolve().parent.parent
USER, OFFICER, PASSWORD = "kay", "Ofc. Kay", "correct horse battery"


def artifacts() -> Path:
    base = Path(os.environ.get("BARKWATCH_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))
    folder = base / "review"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Site:
    base: str
    case: Case


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("review")
    with Services(root / "services") as services:
        case = evidence_with_case(services.influx.url, root / "cases.sqlite", USER, OFFICER,
                                  hash_password(PASSWORD))
        settings = ReviewSettings(port=free_port(), cases_db=str(case.db),
                                  influx=InfluxSettings(url=services.influx.url))
        server = uvicorn.Server(uvicorn_config(settings))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
            time.sleep(0.05)
        try:
            yield Site(f"http://127.0.0.1:{settings.port}", case)
        finally:
            server.should_exit = True
            thread.join(timeout=30)


def chrome(phone_width: int | None = None) -> WebDriver:
    """Headless Chromium, 1280 px wide, or a phone ``phone_width`` px wide (touch, 3x)."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_path, "needs Debian's chromium and chromium-driver " \
        "(scripts/bootstrap.sh dev)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,1600"):
        options.add_argument(argument)
    if phone_width:
        options.add_experimental_option("mobileEmulation", {"deviceMetrics": {
            "width": phone_width, "height": 844, "pixelRatio": 3.0, "touch": True}})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.implicitly_wait(0)
    return driver


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = chrome()
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: WebDriver, css: str, timeout_s: float = 30.0) -> None:
    WebDriverWait(driver, timeout_s).until(lambda d: d.find_elements(By.CSS_SELECTOR, css))


def shot(driver: WebDriver, name: str) -> None:
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1280, max(900, min(int(height) + 100, 6000)))
    driver.save_screenshot(str(artifacts() / f"{name}.png"))


def sign_in(driver: WebDriver, site: Site, password: str = PASSWORD) -> None:
    driver.get(site.base + "/signin")
    driver.find_element(By.ID, "username").send_keys(USER)
    driver.find_element(By.ID, "password").send_keys(password)
    driver.find_element(By.ID, "sign-in").click()


def sign_out(driver: WebDriver) -> None:
    driver.find_element(By.ID, "sign-out").click()
    wait_for(driver, "form.signin")


def audit_actions(site: Site) -> list[tuple[str, str]]:
    with CaseFile(site.case.db) as store:
        return [(e.actor, e.action) for e in store.audit()]


def test_a_page_without_a_session_redirects_to_sign_in(browser: WebDriver, site: Site) -> None:
    browser.delete_all_cookies()
    browser.get(f"{site.base}/cases/{site.case.complaint}")
    wait_for(browser, "form.signin")
    assert browser.current_url == f"{site.base}/signin?next=/cases/{site.case.complaint}"
    assert COMPLAINANT not in browser.page_source
    shot(browser, "01-sign-in")


def test_a_wrong_password_is_refused_and_audited(browser: WebDriver, site: Site) -> None:
    browser.delete_all_cookies()
    sign_in(browser, site, password="correct horse batterY")
    wait_for(browser, "#signin-error")
    assert browser.find_element(By.ID, "signin-error").text == "Wrong user name or password."
    assert not browser.find_elements(By.ID, "sign-out")
    browser.get(site.base + "/cases")
    assert "/signin" in browser.current_url
    assert (OFFICER, "sign-in refused") in audit_actions(site)
    shot(browser, "02-wrong-password")


def test_an_officer_reviews_a_case_records_a_contact_attempt_and_signs_out(
        browser: WebDriver, site: Site) -> None:
    browser.delete_all_cookies()
    before = len(audit_actions(site))
    sign_in(browser, site)
    wait_for(browser, "#devices-now")  # signing in lands on the overview
    browser.find_element(By.LINK_TEXT, "Cases").click()
    wait_for(browser, "#cases")
    assert browser.find_element(By.ID, "signed-in-as").text.startswith(f"Signed in as {OFFICER}")
    row = browser.find_element(By.CSS_SELECTOR, "#cases tr.open")
    assert "12 Elm St" in row.text and "2 linked" in row.text
    shot(browser, "03-cases")

    row.find_element(By.LINK_TEXT, f"#{site.case.complaint}").click()
    wait_for(browser, "#checklist")
    assert COMPLAINANT in browser.find_element(By.ID, "complainant").text
    findings = browser.find_elements(By.CSS_SELECTOR, "#findings-table tr")[1:]
    assert [f.find_elements(By.TAG_NAME, "td")[0].text for f in findings] == [
        "continuous", "intermittent"]
    assert all("verified" in f.text for f in findings)
    checklist = browser.find_elements(By.CSS_SELECTOR, "#checklist tr")[1:]
    assert [c.find_elements(By.TAG_NAME, "td")[0].text for c in checklist] == [
        "1", "2", "3", "4", "5", "6", "7"]
    assert [c.find_elements(By.TAG_NAME, "td")[3].text for c in checklist[:4]] == [
        "met", "met", "met", "not met"]
    shot(browser, "04-case")

    findings[0].find_element(By.CLASS_NAME, "finding-link").click()
    wait_for(browser, "#elements")
    assert browser.find_element(By.ID, "verification").text == "verified"
    WebDriverWait(browser, 30).until(
        lambda d: "interval" in d.find_element(By.ID, "plot-status").text)
    svg = browser.find_element(By.ID, "plot-svg")
    coarse = int(svg.get_attribute("data-interval-s") or 0)
    assert browser.find_elements(By.CSS_SELECTOR, "#plot-svg rect.event")  # the barks
    progress = browser.find_element(By.CSS_SELECTOR, "#plot-svg path.progress")
    assert "L" in (progress.get_attribute("d") or "")  # a drawn line, not lone points
    assert browser.find_elements(By.CSS_SELECTOR, "#plot-svg line.limit")
    shot(browser, "05-finding")
    browser.find_element(By.ID, "zoom-in").click()
    browser.find_element(By.ID, "zoom-in").click()
    WebDriverWait(browser, 30).until(
        lambda d: int(d.find_element(By.ID, "plot-svg").get_attribute("data-interval-s")
                      or 0) < coarse or coarse == 1)
    shot(browser, "06-finding-zoomed")

    browser.get(f"{site.base}/addresses/{site.case.address}/devices")
    wait_for(browser, ".device-state")
    state = browser.find_element(By.CSS_SELECTOR, ".device-state").text
    assert "online since" in state and "2026-05-20" in state and "120.0 dB SPL" in state
    shot(browser, "07-devices")

    browser.get(f"{site.base}/cases/{site.case.complaint}")
    form = browser.find_element(By.ID, "form-contact")
    form.find_element(By.NAME, "at").send_keys("2026-06-01 20:20")
    form.find_element(By.NAME, "method").send_keys("phone")
    Select(form.find_element(By.NAME, "outcome")).select_by_value("ignored")
    form.find_element(By.NAME, "note").send_keys("voicemail full")
    form.find_element(By.TAG_NAME, "button").click()
    wait_for(browser, "#flash")
    assert browser.find_element(By.ID, "flash").text.startswith("Recorded contact attempt")
    contacts = browser.find_element(By.ID, "contacts").text
    assert "phone" in contacts and "ignored" in contacts and OFFICER in contacts
    shot(browser, "08-contact-recorded")

    sign_out(browser)
    browser.get(f"{site.base}/cases/{site.case.complaint}")
    assert "/signin" in browser.current_url
    with CaseFile(site.case.db) as store:
        attempts = store.contact_attempts(site.case.complaint)
        entries = [(e.actor, e.action, e.entity) for e in store.audit()][before:]
    assert [(a.method, a.outcome, a.officer, a.notes) for a in attempts] == [
        ("phone", "ignored", OFFICER, "voicemail full")]
    assert entries == [
        (OFFICER, "sign in", "officer_accounts"),
        (OFFICER, "view complainant identity", "complaints"),  # the case page
        (OFFICER, "view complainant identity", "complaints"),  # again, before recording
        (OFFICER, "record contact attempt", "contact_attempts"),
        (OFFICER, "view complainant identity", "complaints"),  # the page after recording
        (OFFICER, "sign out", "officer_accounts"),
    ]


def test_a_form_without_its_csrf_token_is_refused(browser: WebDriver, site: Site) -> None:
    browser.delete_all_cookies()
    sign_in(browser, site)
    wait_for(browser, "#devices-now")
    browser.get(f"{site.base}/cases/{site.case.complaint}")
    form = browser.find_element(By.ID, "form-observation")
    browser.execute_script(
        "arguments[0].querySelector('input[name=csrf_token]').remove()", form)
    form.find_element(By.NAME, "note").send_keys("barking from the back yard")
    form.find_element(By.TAG_NAME, "button").click()
    wait_for(browser, "#error-message")
    assert "403" in browser.find_element(By.TAG_NAME, "h1").text
    assert "CSRF" in browser.find_element(By.ID, "error-message").text
    shot(browser, "09-csrf-refused")
    with CaseFile(site.case.db) as store:
        assert store.observations(site.case.complaint) == []
    assert audit_actions(site)[-1] == (OFFICER, "form refused: missing or wrong CSRF token")
    browser.get(f"{site.base}/cases/{site.case.complaint}")
    sign_out(browser)
