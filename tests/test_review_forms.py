"""Record forms on the case page (issue 35): a refused entry comes back with its error beside
its form and what was typed kept; no kind is chosen for the officer. Against the real server of
tests/test_review_http.py (uvicorn, real InfluxDB, real case file)."""

from __future__ import annotations

import html
import re

from analyzer.cases import CaseFile
from tests.test_review_http import Browser, Server, server

__all__ = ["server"]  # the module-scoped server fixture, one for this module


def _form(body: str, kind: str) -> str:
    found = re.search(rf'<form[^>]*id="form-{kind}".*?</form>', body, re.S)
    assert found, kind
    return found.group(0)


def test_a_refused_observation_keeps_what_was_typed_and_says_why_beside_its_form(
        server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    browser.request(f"/cases/{server.case.complaint}")
    with CaseFile(server.case.db) as store:
        before = len(store.observations(server.case.complaint))
    note = "Heard barking from the back yard <for 20 min> & more"
    status, _, body = browser.request(
        f"/cases/{server.case.complaint}/record/observation",
        {"csrf_token": browser.token, "at": "1999-06-01 21:05", "note": note})
    assert status == 400
    form = _form(body, "observation")
    assert 'id="form-error"' in form and "The observation was not recorded" in form
    assert "2000" in html.unescape(form)  # the reason: before the earliest record time
    assert html.escape(note, quote=False) in form  # kept, escaped
    assert 'value="1999-06-01 21:05" autofocus' in form
    assert 'id="form-error"' not in _form(body, "contact")  # the other forms are untouched
    with CaseFile(server.case.db) as store:
        assert len(store.observations(server.case.complaint)) == before
    # sent again corrected, it is recorded and the page says so
    status, location, _ = browser.request(
        f"/cases/{server.case.complaint}/record/observation",
        {"csrf_token": browser.token, "at": "", "note": note})
    assert (status, location) == (303, f"/cases/{server.case.complaint}#records")
    with CaseFile(server.case.db) as store:
        assert store.observations(server.case.complaint)[-1].notes == note


def test_no_exception_or_disposition_kind_is_chosen_for_the_officer(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    _, _, body = browser.request(f"/cases/{server.case.complaint}")
    for kind in ("exception", "disposition", "contact"):
        form = _form(body, kind)
        assert " selected" not in form, kind
        assert '<option value="">choose…</option>' in form, kind
    with CaseFile(server.case.db) as store:
        before = len(store.exceptions(server.case.complaint))
    status, _, body = browser.request(f"/cases/{server.case.complaint}/record/exception",
                                      {"csrf_token": browser.token, "kind": "", "note": "x"})
    assert status == 400 and "The exception was not recorded" in _form(body, "exception")
    with CaseFile(server.case.db) as store:
        assert len(store.exceptions(server.case.complaint)) == before


def test_the_finding_page_shows_its_elements_as_markup_not_escaped_text(server: Server) -> None:
    browser = Browser(server.base)
    browser.sign_in()
    status, _, body = browser.request(f"/cases/{server.case.complaint}/findings/1")
    assert status == 200
    elements = re.search(r'<table id="elements">.*?</table>', body, re.S)
    assert elements and "<span class='ok'>" in elements.group(0)
    assert "&lt;span" not in elements.group(0)
