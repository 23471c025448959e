"""The premises' sector in the review app (issue 36): entered with the placement, shown in the
field check and changed there, audited; a bad corner refused beside its form. Against the real
server of tests/test_review_http.py (uvicorn, real InfluxDB, real case file)."""

from __future__ import annotations

import json
import tomllib

import pytest

from analyzer.acoustics import InstallationRecord
from analyzer.cases import CaseFile
from sensor.configfile import build
from tests.test_review_http import Server, server
from tests.test_review_workflow import _administrator, _form, _last_audit, _officer

__all__ = ["server"]


def _record(server: Server, address: int) -> InstallationRecord:
    with CaseFile(server.case.db) as store:
        placement = store.placements(address)[0]
    return build(InstallationRecord, tomllib.loads(placement.site_record))


def test_the_sector_is_entered_with_the_placement_and_changed_in_the_field_check(
        server: Server) -> None:
    admin = _administrator(server)
    admin.request("/addresses")
    _, location, _ = admin.request("/addresses", {"csrf_token": admin.token,
                                                  "premises": "9 Elm St"})
    address = int(location.rsplit("-", 1)[1])
    officer = _officer(server)
    page = f"/addresses/{address}/devices"
    officer.request(page)
    typed = {"csrf_token": officer.token, "device": "glencoe-0077",
             "placed": "2026-06-02 09:30", "sensor_m": "20", "boundary_m": "6",
             "sensor_height_m": "2", "ground": "mixed", "corner_1_deg": "350",
             "corner_2_deg": ""}
    status, _, body = officer.request(f"/addresses/{address}/place", typed)
    assert status == 400 and "give the compass bearings of both outer corners" in _form(
        body, "form-place")
    status, _, _ = officer.request(f"/addresses/{address}/place",
                                   {**typed, "corner_2_deg": "20"})
    assert status == 303
    sector = _record(server, address).sector
    assert sector.bearing_deg == pytest.approx(5.0) and sector.half_width_deg == 15.0
    assert sector.distance_m == 20.0
    with CaseFile(server.case.db) as store:
        placement = store.placements(address)[0]
    _, _, body = officer.request(page)
    assert "5.0 deg +- 15.0 (from 350.0 clockwise to 20.0 deg, compass), 20 m away" in body
    form = _form(body, f"form-sector-{placement.id}")
    assert 'value="350.0"' in form and 'value="20.0"' in form
    action = f"/addresses/{address}/placements/{placement.id}/sector"
    status, _, body = officer.request(action, {"csrf_token": officer.token,
                                               "corner_1_deg": "100", "corner_2_deg": "400"})
    form = _form(body, f"form-sector-{placement.id}")
    assert status == 400 and "second corner: 400 is not a compass bearing" in form
    assert 'value="400" ' in form or 'value="400">' in form
    status, location, _ = officer.request(action, {"csrf_token": officer.token,
                                                   "corner_1_deg": "100", "corner_2_deg": "140"})
    assert (status, location) == (303, page)
    assert _last_audit(server) == ("Ofc. Kay", "set premises sector", "placements")
    record = _record(server, address)
    assert (record.sector.bearing_deg, record.sector.half_width_deg) == (120.0, 20.0)
    assert (record.source_to_sensor_m, record.sensor_height_m) == (20.0, 2.0)  # kept
    with CaseFile(server.case.db) as store:
        detail = json.loads(store.audit()[-1].detail)
    assert "bearing_deg = 5.0" in detail["site_record_before"]
    assert "bearing_deg = 120.0" in detail["site_record"]
    _, _, body = officer.request(page)
    assert "120.0 deg +- 20.0 (from 100.0 clockwise to 140.0 deg" in body
