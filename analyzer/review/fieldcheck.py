"""The field check (issue 35): at installation the officer opens the device's page on a phone
and watches it live — frames arriving, the level now, the calibration just done, the clock,
the outbox backlog and the coverage since installation — so they leave knowing it works. The
devices page polls this JSON every few seconds (static/devices.js); each poll takes a place of
the page gate, as the page does. The field check also shows the premises' sector of the
placement's installation record (issue 36), which the officer sets there from the bearings of
the premises' two corners (workflow.set_sector), and the latest check of the device's
microphone array (``barkwatch-sensor bearing-check``: claps at a known bearing; issue 36, item
5): the bearing measured against the one expected, the verdict and, on a failure, the
orientation that would fix it, so an array mounted the wrong way round is caught on site."""

from __future__ import annotations

import tomllib
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from analyzer.acoustics import InstallationRecord
from analyzer.acoustics.site import describe_sector, validate_site
from analyzer.cases import CaseError, Placement, format_time
from analyzer.review.context import Review, ago, percent
from analyzer.review.overview import condition
from analyzer.review.queries import (
    DeviceState,
    StoredBearingCheck,
    device_state,
    frames_since,
    last_bearing_check,
)
from analyzer.review.sessions import OfficerSession
from sensor.configfile import build
from sensor.errors import ConfigError

NS = 1_000_000_000
RECENT_S = 60  # "frames arriving": how many of the last minute's 60 are stored


NOT_CHECKED = ("not checked yet: at the sensor, clap at a spot whose compass bearing you know "
               "and run barkwatch-sensor bearing-check --config sensor.toml --expected DEG")


def bearing_check_text(check: StoredBearingCheck | None, placement: Placement,
                       now_ns: int) -> tuple[str, str]:
    """The field check's words for the device's latest array check and its verdict
    (``passed``, ``failed`` or ``none``)."""
    if check is None:
        return NOT_CHECKED, "none"
    when = f"{format_time(check.time_ns)} ({ago((now_ns - check.time_ns) / NS)} ago)"
    if check.time_ns < placement.placed_ns:
        when += ", before this placement began"
    found = f"{check.claps_with_bearing} of {check.claps} clap(s) with a bearing"
    if check.measured_deg is None or check.offset_deg is None:
        return (f"FAILED: no bearing measured ({found}); clap louder, closer or away from "
                f"walls and check again. Checked {when}", "failed")
    measured = (f"measured {check.measured_deg:.0f}° against {check.expected_deg:.0f}° "
                f"expected (off by {check.offset_deg:+.0f}°, tolerance "
                f"{check.tolerance_deg:.0f}°; {found})")
    if check.passed:
        return f"passed: {measured}. Checked {when}", "passed"
    fix = ("" if check.suggested_orientation_deg is None else
           f"set [array] orientation_deg = {check.suggested_orientation_deg:.0f} or turn the "
           "array, and ")
    return (f"FAILED: {measured}: the array is turned or its orientation entered wrongly; "
            f"{fix}check again. Checked {when}", "failed")


def live_fields(state: DeviceState, placement: Placement, frames_last_minute: int,
                now_ns: int, check: StoredBearingCheck | None = None) -> dict[str, Any]:
    """What the field check shows, as text ready to put on the page (the page and the poll
    show the same words)."""
    beat = state.last_heartbeat
    clock = ("no heartbeat yet" if beat.get("clock_synchronised") is None else
             "synchronised" if beat["clock_synchronised"] else "NOT synchronised")
    calibration = state.calibration_date or "no calibration date"
    if state.full_scale_db is not None:
        calibration += f"; full scale {state.full_scale_db} dB SPL"
    coverage = (f"{percent(state.coverage_fraction)} of {state.span_s / 3600:.1f} h measured"
                if state.coverage_fraction is not None else "placed just now")
    array_check, verdict = bearing_check_text(check, placement, now_ns)
    return {
        "device_id": placement.device_id,
        "condition": condition(state, now_ns),
        "last_frame": (f"{format_time(state.last_frame_ns)} "
                       f"({ago((now_ns - state.last_frame_ns) / NS)} ago)"
                       if state.last_frame_ns else "none stored yet"),
        "frames_last_minute": f"{frames_last_minute} of {RECENT_S}",
        "laeq_now": (f"{state.last_laeq_db:.1f} dB(A)" if state.last_laeq_db is not None
                     else "no level yet"),
        "calibration": calibration,
        "clock": clock,
        "outbox": (f"{beat['outbox_backlog']} frame(s) waiting"
                   if beat.get("outbox_backlog") is not None else "no heartbeat yet"),
        "coverage": coverage,
        "bearing_check": array_check,
        "bearing_check_verdict": verdict,
        "checked": format_time(now_ns),
    }


def placement_state(review: Review, placement: Placement, now_ns: int,
                    removed_too: bool = False) -> tuple[DeviceState, dict[str, Any] | None]:
    """One placement read from InfluxDB now: its device's state while placed, and the field
    check's live fields (None once the device was removed, unless ``removed_too``)."""
    removed = placement.removed_ns is not None and placement.removed_ns <= now_ns
    until = min(placement.removed_ns or now_ns, now_ns)
    state = device_state(review.client, placement.device_id, placement.placed_ns, until,
                         review.day_frames)
    if removed and not removed_too:
        return state, None
    recent = frames_since(review.client, placement.device_id, now_ns - RECENT_S * NS, now_ns)
    check = last_bearing_check(review.client, placement.device_id, until)
    return state, live_fields(state, placement, recent, now_ns, check)


def live_data(review: Review, request: Request, session: OfficerSession) -> Response:
    """GET .../placements/P/live: the field check's fields as JSON."""
    address_id = int(request.path_params["address"])
    placement_id = int(request.path_params["placement"])
    with review.case_file() as store:
        placements = {p.id: p for p in store.placements(address_id)}
    if placement_id not in placements:
        return JSONResponse({"error": f"address {address_id} has no placement "
                             f"{placement_id}"}, status_code=404)
    _, live = placement_state(review, placements[placement_id], review.clock(), True)
    return JSONResponse(live, headers={"Cache-Control": "no-store"})


def placement_record(site_record: str) -> InstallationRecord:
    """A placement's installation record (TOML text); CaseError when it has none."""
    if not site_record.strip():
        raise CaseError("this placement has no installation record to hold the sector")
    try:
        return validate_site(build(InstallationRecord, tomllib.loads(site_record)))
    except tomllib.TOMLDecodeError as exc:
        raise CaseError(f"the placement's installation record is not TOML: {exc}") from exc


def placement_sector(site_record: str) -> dict[str, Any]:
    """The field check's premises sector of a placement's installation record: its words, and
    its corners to fill the form with (empty when not entered or the record has none)."""
    try:
        sector = placement_record(site_record).sector
    except (CaseError, ConfigError) as exc:
        return {"text": f"no sector: {exc}", "corners": ("", "")}
    corners = tuple(f"{edge:.1f}" for edge in sector.edges_deg) if sector.entered else ("", "")
    return {"text": describe_sector(sector), "corners": corners}
