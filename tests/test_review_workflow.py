"""The case's workflow in the browser (issue 35): an administrator adds an address; an officer
opens a complaint, places a device with its installation record, removes it, links the
findings that cover a complaint and attests a seizure condition. Each through the CLI's
CaseStore call (the same audit entries), each refused form back beside its error with what
was typed. Against the real server of tests/test_review_http.py (uvicorn, real InfluxDB,
real case file)."""

from __future__ import annotations

import html
import re
import tomllib

from analyzer.acoustics import InstallationRecord
from analyzer.acoustics.site import validate_site
from analyzer.cases import ADMINISTRATOR, CaseFile, add_account, find_account, format_time
from analyzer.review import hash_password
from sensor.configfile import build
from tests.review_scene import DEVICE, T0
from tests.test_review_http import PASSWORD, Browser, Server, server

__all__ = ["server"]  # the module-scoped server fixture, one for this module
NS = 1_000_000_000
ADMIN = "ada"


def _form(body: str, form_id: str) -> str:
    found = re.search(rf'<form[^>]*id="{form_id}".*?</form>', body, re.S)
    assert found, form_id
    return found.group(0)


def _officer(server: Server) -> Browser:
    browser = Browser(server.base)
    assert browser.sign_in()[0] == 303
    return browser


def _administrator(server: Server) -> Browser:
    with CaseFile(server.case.db) as store:
        if find_account(store, ADMIN) is None:
            add_account(store, ADMIN, "Adm. Ada", hash_password(PASSWORD), "setup",
                        ADMINISTRATOR)
    browser = Browser(server.base)
    assert browser.sign_in(PASSWORD, ADMIN)[0] == 303
    return browser


def _last_audit(server: Server) -> tuple[str, str, str]:
    with CaseFile(server.case.db) as store:
        entry = store.audit()[-1]
    return entry.actor, entry.action, entry.entity


def test_an_administrator_adds_an_address_and_an_officer_cannot(server: Server) -> None:
    admin = _administrator(server)
    admin.request("/addresses")
    status, location, _ = admin.request("/addresses", {
        "csrf_token": admin.token, "premises": "40 Birch Ave", "owner": "D. Keeper",
        "owner_contact": "555-0199"})
    assert status == 303 and location.startswith("/addresses#address-")
    assert _last_audit(server) == ("Adm. Ada", "add address", "addresses")
    _, _, body = admin.request("/addresses")
    assert "40 Birch Ave" in body and "D. Keeper, 555-0199" in body
    # the same premises again: refused beside the form, what was typed kept
    status, _, body = admin.request("/addresses", {
        "csrf_token": admin.token, "premises": "40 Birch Ave", "owner": "someone else"})
    form = _form(body, "form-address")
    assert status == 400 and 'id="form-error"' in form
    assert "is &#39;40 Birch Ave&#39; already" in form or "is '40 Birch Ave' already" in \
        html.unescape(form)
    assert 'value="someone else"' in form
    officer = _officer(server)
    _, _, body = officer.request("/addresses")
    assert "40 Birch Ave" in body and 'id="form-address"' not in body
    status, _, body = officer.request("/addresses", {"csrf_token": officer.token,
                                                     "premises": "41 Birch Ave"})
    assert status == 403 and "manages accounts and addresses" in body
    with CaseFile(server.case.db) as store:
        assert "41 Birch Ave" not in [a.premises for a in store.addresses()]


def test_an_officer_opens_a_complaint_and_a_refused_one_keeps_what_was_typed(
        server: Server) -> None:
    officer = _officer(server)
    _, _, body = officer.request(f"/cases/new?address={server.case.address}")
    form = _form(body, "form-complaint")
    assert f'<option value="{server.case.address}" selected>' in form
    typed = {"csrf_token": officer.token, "address": str(server.case.address),
             "complainant": "Bo Nextdoor", "contact": "bo@example.org", "role": "resident",
             "received": "2026-06-01 20:50", "span_start": "2026-06-01 19:55",
             "span_end": "2026-06-01 20:30", "note": "barking <in the yard> & howling"}
    with CaseFile(server.case.db) as store:
        before = len(store.complaints())
    status, _, body = officer.request("/cases/new", typed)  # contemporaneous not answered
    form = _form(body, "form-complaint")
    assert status == 400 and "called while the barking went on" in form
    assert 'value="Bo Nextdoor"' in form and 'value="2026-06-01 19:55"' in form
    assert html.escape(typed["note"], quote=False) in form
    status, _, body = officer.request("/cases/new", {**typed, "contemporaneous": "yes",
                                                     "span_end": "2026-06-01 19:00"})
    assert status == 400 and "ends before it starts" in _form(body, "form-complaint")
    assert 'value="yes" required checked' in _form(body, "form-complaint")
    with CaseFile(server.case.db) as store:
        assert len(store.complaints()) == before  # nothing written by either refusal
    status, location, _ = officer.request("/cases/new", {**typed, "contemporaneous": "yes"})
    assert status == 303
    complaint_id = int(location.rsplit("/", 1)[1])
    with CaseFile(server.case.db) as store:
        opened = store.complaint(complaint_id)
    assert (opened.complainant_name, opened.officer, opened.contemporaneous) == (
        "Bo Nextdoor", "Ofc. Kay", True)
    assert format_time(opened.span_start_ns).startswith("2026-06-01 19:55")
    assert _last_audit(server) == ("Ofc. Kay", "open complaint", "complaints")
    # its findings: the stored windows of the address's device over its span, linked
    status, location, _ = officer.request(f"/cases/{complaint_id}/link",
                                          {"csrf_token": officer.token})
    assert (status, location) == (303, f"/cases/{complaint_id}#findings")
    _, _, body = officer.request(location.split("#")[0])
    assert "Linked 2 finding(s) as Ofc. Kay; 2 in all." in body
    with CaseFile(server.case.db) as store:
        links = store.links(complaint_id)
        assert [link.rule for link in links] == ["continuous", "intermittent"]
        assert [e.action for e in store.audit(complaint_id)].count(
            "link evidence window") == 2
    officer.request(f"/cases/{complaint_id}")
    officer.request(f"/cases/{complaint_id}/link", {"csrf_token": officer.token})
    _, _, body = officer.request(f"/cases/{complaint_id}")
    assert "No finding was linked: none stored covers" in body and "(2 linked before)" in body


def test_an_officer_attests_a_condition_and_the_checklist_shows_it(server: Server) -> None:
    officer = _officer(server)
    complaint = server.case.complaint
    _, _, body = officer.request(f"/cases/{complaint}")
    assert "4. The officer has made reasonable attempts" in _form(body, "form-attestation")
    status, _, body = officer.request(f"/cases/{complaint}/record/attestation", {
        "csrf_token": officer.token, "condition": "9", "note": "seen from the alley"})
    form = _form(body, "form-attestation")
    assert status == 400 and "choose the condition attested (4, 5, 6 or 7)" in form
    assert "seen from the alley" in form
    status, location, _ = officer.request(f"/cases/{complaint}/record/attestation", {
        "csrf_token": officer.token, "condition": "5", "note": "the dog is in the yard"})
    assert (status, location) == (303, f"/cases/{complaint}#records")
    assert _last_audit(server) == ("Ofc. Kay", "attest condition 5", "attestations")
    _, _, body = officer.request(f"/cases/{complaint}")
    table = re.search(r'<table id="attestations">.*?</table>', body, re.S)
    assert table and "the dog is in the yard" in table.group(0)
    row = re.search(r"<tr><td>5</td>.*?</tr>", body, re.S)
    assert row and "class=\"ok\">met<" in row.group(0)


def test_an_officer_places_a_device_with_its_record_and_removes_it(server: Server) -> None:
    admin = _administrator(server)
    admin.request("/addresses")
    _, location, _ = admin.request("/addresses", {"csrf_token": admin.token,
                                                  "premises": "7 Oak Ct"})
    address = int(location.rsplit("-", 1)[1])
    officer = _officer(server)
    page = f"/addresses/{address}/devices"
    _, _, body = officer.request(page)
    assert 'id="no-device"' in body and 'id="form-place"' in body
    typed = {"csrf_token": officer.token, "device": "glencoe-0042",
             "placed": "2026-06-02 09:30", "dog_location": "kennel, back yard",
             "sensor_m": "12,5", "boundary_m": "8", "sensor_height_m": "1.5",
             "ground": "porous"}
    status, _, body = officer.request(f"/addresses/{address}/place", typed)
    form = _form(body, "form-place")
    assert status == 400 and "dog to sensor (m): &#39;12,5&#39; is not a number" in form
    assert 'value="12,5"' in form and 'value="kennel, back yard"' in form
    assert '<option value="porous" selected>' in form
    status, _, body = officer.request(f"/addresses/{address}/place",
                                      {**typed, "sensor_m": "0.5"})
    assert status == 400 and "distance_uncertainty_m" in _form(body, "form-place")
    with CaseFile(server.case.db) as store:
        assert store.placements(address) == []
    status, location, _ = officer.request(f"/addresses/{address}/place",
                                          {**typed, "sensor_m": "12.5"})
    assert (status, location) == (303, page)
    assert _last_audit(server) == ("Ofc. Kay", "place device", "placements")
    with CaseFile(server.case.db) as store:
        placement = store.placements(address)[0]
    record = validate_site(build(InstallationRecord, tomllib.loads(placement.site_record)))
    assert (record.device_id, record.address, record.source_to_sensor_m,
            record.source_to_boundary_m, record.ground, record.installed_by,
            record.installed_at) == ("glencoe-0042", "7 Oak Ct", 12.5, 8.0, "porous",
                                     "Ofc. Kay", "2026-06-02")
    assert placement.removed_ns is None
    # removal: before the placement is refused beside its form; then recorded once
    _, _, body = officer.request(page)
    remove = f"/addresses/{address}/placements/{placement.id}/remove"
    status, _, body = officer.request(remove, {"csrf_token": officer.token,
                                               "at": "2026-06-01 09:00"})
    form = _form(body, f"form-remove-{placement.id}")
    assert status == 400 and "not after the placement time" in form
    assert 'value="2026-06-01 09:00" autofocus' in form
    status, location, _ = officer.request(remove, {"csrf_token": officer.token,
                                                   "at": "2026-06-09 17:00"})
    assert (status, location) == (303, page)
    assert _last_audit(server) == ("Ofc. Kay", "remove device", "placements")
    _, _, body = officer.request(page)
    assert f'id="form-remove-{placement.id}"' not in body
    assert "2026-06-09 17:00" in body
    # a placement of another address is no route to remove
    status, _, _ = officer.request(
        f"/addresses/{server.case.address}/placements/{placement.id}/remove",
        {"csrf_token": officer.token})
    assert status == 404


def test_an_administrator_records_nothing_of_the_workflow(server: Server) -> None:
    admin = _administrator(server)
    admin.request("/addresses")
    with CaseFile(server.case.db) as store:
        audited = len(store.audit())
    for path, form in (
            ("/cases/new", {"address": str(server.case.address), "complainant": "X"}),
            (f"/cases/{server.case.complaint}/link", {}),
            (f"/cases/{server.case.complaint}/record/attestation", {"condition": "4"}),
            (f"/addresses/{server.case.address}/place", {"device": DEVICE})):
        status, _, body = admin.request(path, {"csrf_token": admin.token, **form})
        assert status == 403, path
        assert "Only an officer's account records evidence" in html.unescape(body), path
    assert admin.request("/cases/new")[0] == 403
    with CaseFile(server.case.db) as store:
        assert len(store.audit()) == audited
        assert store.placements(server.case.address)[0].placed_ns == T0 - 86400 * NS
