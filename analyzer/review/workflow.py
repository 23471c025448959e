"""The case's workflow in the browser (issue 35): open a complaint (or record an earlier one),
add an address (administrators), place a device with its installation record and remove it,
and link the findings that cover a complaint. Each goes through the same CaseStore call as
``barkwatch case open|address|place|remove|link``, so the audit log has the same entries
whichever was used; a refused form comes back beside its error with what was typed."""

from __future__ import annotations

import dataclasses
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from analyzer.acoustics import InstallationRecord, site_template
from analyzer.acoustics.attribution import PremisesSector
from analyzer.acoustics.site import describe_sector, validate_site
from analyzer.cases import (
    ROLES,
    CaseError,
    TimeInputError,
    format_time,
    link_covering_windows,
    parse_local_time,
)
from analyzer.cases.store import MAX_NOTE_CHARS
from analyzer.review.context import Review
from analyzer.review.fieldcheck import placement_record
from analyzer.review.forms import done, number, shown_again, text
from analyzer.review.sessions import OfficerSession
from sensor.configfile import build
from sensor.errors import ConfigError
from sensor.wire import DEVICE_ID_PATTERN

REFUSED = (CaseError, TimeInputError, ConfigError)


def _time(data: FormData, name: str, what: str, required: bool = True) -> int | None:
    """A typed time (Chicago local unless a zone is given); None when optional and empty."""
    typed = text(data, name).strip()
    if not typed:
        if required:
            raise CaseError(f"{what} is missing")
        return None
    return parse_local_time(typed, what)


# --- complaints -----------------------------------------------------------------------------

def new_complaint_page(review: Review, request: Request, session: OfficerSession,
                       refused: dict[str, Any] | None = None, status_code: int = 200
                       ) -> Response:
    """The form that opens a complaint (``?address=N`` chooses the address)."""
    with review.case_file() as store:
        addresses = store.addresses()
    chosen = request.query_params.get("address", "")
    return review.render(request, "complaint_new.html", {
        "addresses": addresses, "roles": ROLES, "chosen": chosen,
        "max_note_chars": MAX_NOTE_CHARS, **({"refused": refused} if refused else {})},
        status_code)


def _contemporaneous(data: FormData) -> bool:
    answer = text(data, "contemporaneous")
    if answer not in ("yes", "no"):
        raise CaseError("say whether the complainant called while the barking went on")
    return answer == "yes"


def open_complaint(review: Review, request: Request, session: OfficerSession | None,
                   data: FormData) -> Response:
    """``barkwatch case open``: then the new case's page."""
    assert session is not None  # the route requires a signed-in officer
    try:
        address = text(data, "address")
        if not address.isdigit():
            raise CaseError("choose the address the complaint is about")
        with review.case_file() as store:
            complaint_id = store.open_complaint(
                int(address), text(data, "complainant"), text(data, "contact"),
                _time(data, "received", "received") or 0,
                _time(data, "span_start", "barking from") or 0,
                _time(data, "span_end", "barking to") or 0,
                _contemporaneous(data), session.officer, text(data, "role"),
                text(data, "note"))
    except REFUSED as exc:
        return shown_again(review, request, session, new_complaint_page, "complaint",
                           f"The complaint was not opened: {exc}", data, False, "/cases/new")
    return done(request, f"Opened complaint #{complaint_id} as {session.officer}.",
                f"/cases/{complaint_id}")


# --- addresses ------------------------------------------------------------------------------

def addresses_page(review: Review, request: Request, session: OfficerSession,
                   refused: dict[str, Any] | None = None, status_code: int = 200
                   ) -> Response:
    """Every address with its devices and complaints; an administrator adds addresses."""
    with review.case_file() as store:
        rows = [(a, store.placements(a.id), store.complaints(a.id))
                for a in store.addresses()]
    return review.render(request, "addresses.html", {
        "rows": rows, **({"refused": refused} if refused else {})}, status_code)


def add_address(review: Review, request: Request, session: OfficerSession | None,
                data: FormData) -> Response:
    """``barkwatch case address`` (administrators)."""
    assert session is not None
    try:
        with review.case_file() as store:
            address_id = store.add_address(text(data, "premises"), session.officer,
                                           text(data, "owner"), text(data, "owner_contact"))
    except REFUSED as exc:
        return shown_again(review, request, session, addresses_page, "address",
                           f"The address was not added: {exc}", data, False, "/addresses")
    return done(request, f"Added address #{address_id}: {text(data, 'premises').strip()}.",
                f"/addresses#address-{address_id}")


# --- devices --------------------------------------------------------------------------------

def sector_of_form(data: FormData, distance_m: float) -> PremisesSector:
    """The premises' sector from a form's two corner bearings (both empty: not entered);
    CaseError naming the field otherwise."""
    first, second = text(data, "corner_1_deg").strip(), text(data, "corner_2_deg").strip()
    if not first and not second:
        return PremisesSector()
    if not first or not second:
        raise CaseError("premises' corners: give the compass bearings of both outer corners "
                        "(or neither)")
    bearings = [number(data, name, what) for name, what in (
        ("corner_1_deg", "first corner (deg)"), ("corner_2_deg", "second corner (deg)"))]
    for bearing, what in zip(bearings, ("first corner", "second corner"), strict=True):
        if not 0.0 <= bearing <= 360.0:
            raise CaseError(f"{what}: {bearing:g} is not a compass bearing (0-360 degrees)")
    sector = PremisesSector.from_corners(bearings[0], bearings[1], distance_m)
    if not sector.entered:
        raise CaseError("premises' corners: the two bearings are the same; the premises "
                        "must span an angle")
    return sector


def installation_record(data: FormData, device_id: str, premises: str, officer: str,
                        placed_ns: int) -> str:
    """The installation record (TOML, as ``barkwatch site create`` writes it) from the
    placement form's fields, checked as the analyzer checks it (ConfigError naming the key)."""
    values: dict[str, Any] = {
        "device_id": device_id, "address": premises,
        "dog_location": text(data, "dog_location").strip(),
        "source_to_sensor_m": number(data, "sensor_m", "dog to sensor (m)"),
        "source_to_boundary_m": number(data, "boundary_m", "dog to boundary (m)"),
        "sensor_height_m": number(data, "sensor_height_m", "microphone height (m)"),
        "ground": text(data, "ground"), "installed_by": officer,
        "installed_at": format_time(placed_ns, False)[:10]}
    record = dataclasses.replace(validate_site(build(InstallationRecord, values)),
                                 sector=sector_of_form(data, values["source_to_sensor_m"]))
    return site_template(device_id, **{name: value for name, value in record.as_dict().items()
                                       if name != "device_id"})


def place_device(review: Review, request: Request, session: OfficerSession | None,
                 data: FormData) -> Response:
    """``barkwatch case place`` with its installation record."""
    from analyzer.review.pages import devices_page

    assert session is not None
    address_id = int(request.path_params["address"])
    device_id = text(data, "device").strip()
    try:
        if not DEVICE_ID_PATTERN.match(device_id):
            raise CaseError(f"device id {device_id!r} is not one: lower-case letters, digits, "
                            "'-' and '_', at most 64 characters, as on the device's label")
        with review.case_file() as store:
            address = store.address(address_id)
            placed = _time(data, "placed", "placed from") or 0
            record = installation_record(data, device_id, address.premises, session.officer,
                                         placed)
            number_ = store.place_device(address_id, device_id, placed, session.officer,
                                         _time(data, "removed", "removed at", False), record)
    except REFUSED as exc:
        return shown_again(review, request, session, devices_page, "place",
                           f"The device was not placed: {exc}", data, True,
                           f"/addresses/{address_id}/devices")
    return done(request, f"Placement #{number_}: {device_id} at {address.premises}, recorded "
                f"as {session.officer}.", f"/addresses/{address_id}/devices")


def set_sector(review: Review, request: Request, session: OfficerSession | None,
               data: FormData) -> Response:
    """The field check's premises sector: the placement's installation record again with the
    sector from the two corners typed (both empty: not entered)."""
    from analyzer.review.pages import devices_page

    assert session is not None
    address_id = int(request.path_params["address"])
    placement_id = int(request.path_params["placement"])
    page = f"/addresses/{address_id}/devices"
    with review.case_file() as store:
        placements = {p.id: p for p in store.placements(address_id)}
    if placement_id not in placements:
        return review.error(request, 404, f"Address {address_id} has no placement "
                            f"{placement_id}.")
    placement = placements[placement_id]
    try:
        record = placement_record(placement.site_record)
        sector = sector_of_form(data, record.sector.distance_m or record.source_to_sensor_m)
        updated = dataclasses.replace(record, sector=sector)
        text_ = site_template(placement.device_id, **{
            name: value for name, value in updated.as_dict().items() if name != "device_id"})
        with review.case_file() as store:
            store.set_site_record(placement_id, text_, session.officer)
    except REFUSED as exc:
        return shown_again(review, request, session, devices_page, f"sector-{placement_id}",
                           f"The premises' sector was not changed: {exc}", data, True, page)
    return done(request, f"Premises' sector of {placement.device_id}: "
                f"{describe_sector(sector)}; recorded as {session.officer}.", page)


def remove_device(review: Review, request: Request, session: OfficerSession | None,
                  data: FormData) -> Response:
    """``barkwatch case remove``: the device stops measuring at the address."""
    from analyzer.review.pages import devices_page

    assert session is not None
    address_id = int(request.path_params["address"])
    placement_id = int(request.path_params["placement"])
    with review.case_file() as store:
        if placement_id not in {p.id for p in store.placements(address_id)}:
            return review.error(request, 404, f"Address {address_id} has no placement "
                                f"{placement_id}.")
        try:
            at = _time(data, "at", "removed at", False) or review.clock()
            store.remove_device(placement_id, at, session.officer)
        except REFUSED as exc:
            return shown_again(review, request, session, devices_page,
                               f"remove-{placement_id}", f"The removal was not recorded: {exc}",
                               data, True, f"/addresses/{address_id}/devices")
    return done(request, f"Placement #{placement_id} ended {format_time(at)}, recorded as "
                f"{session.officer}.", f"/addresses/{address_id}/devices")


# --- evidence links -------------------------------------------------------------------------

def link_evidence(review: Review, request: Request, session: OfficerSession | None,
                  _: FormData) -> Response:
    """``barkwatch case link``: every stored finding that covers the complaint's span for the
    devices placed at its address, linked (queries InfluxDB: a place of the page gate)."""
    assert session is not None
    complaint_id = int(request.path_params["complaint"])

    def link() -> Response:
        with review.case_file() as store:
            added, total = link_covering_windows(store, review.client, complaint_id,
                                                 session.officer)
        if not added:
            message = (f"No finding was linked: none stored covers the complaint's span for "
                       f"the devices placed at the address ({total} linked before).")
        else:
            message = (f"Linked {len(added)} finding(s) as {session.officer}; {total} in all.")
        return done(request, message, f"/cases/{complaint_id}#findings")
    return review.gated(request, session, link)
