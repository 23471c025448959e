"""The pages: cases, one case, one finding (and its plot data), devices at an address, and the
evidence report as HTML and PDF. Each view of a complainant's identity is audited."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from analyzer.cases import (
    CONTACT_OUTCOMES,
    DISPOSITIONS,
    EXCEPTION_KINDS,
    CaseError,
    CaseStore,
    Complaint,
    candidate_windows,
    read_case,
)
from analyzer.cases.checklist import CONDITION_TEXT
from analyzer.cases.records import CONDITIONS_TO_ATTEST
from analyzer.cases.store import MAX_NOTE_CHARS
from analyzer.errors import AnalyzerError
from analyzer.review.context import IDENTITY_VIEWED, Review
from analyzer.review.queries import (
    QueryInputError,
    RollupMissing,
    device_clause,
    plot_data,
)
from analyzer.review.refusals import LateResponse
from analyzer.review.renders import RenderRefused
from analyzer.review.sessions import OfficerSession
from analyzer.store import load_events

NS = 1_000_000_000
MS = 1_000_000
# The report shows no script and only inline CSS and data: images.
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
MAX_PLOT_SPAN_NS = 31 * 86400 * NS
MIN_PLOT_SPAN_NS = 10 * NS
ATTESTED = [(number, CONDITION_TEXT[number]) for number in CONDITIONS_TO_ATTEST]


def _audit_identity(store: CaseStore, session: OfficerSession, request: Request,
                    complaint_ids: list[int]) -> None:
    store.record_access(session.officer, IDENTITY_VIEWED, "complaints", complaint_ids,
                        {"page": request.url.path, "username": session.username})


@dataclass(frozen=True)
class CaseRow:
    """One line of the cases page."""

    complaint: Complaint
    premises: str
    address_id: int
    open: bool
    last_complaint_ns: int
    linked: int
    covering: int | None  # stored windows covering the span when none is linked (None: unknown)


def cases_page(review: Review, request: Request, session: OfficerSession) -> Response:
    """Every complaint, open ones first, newest first within each."""
    rows: list[CaseRow] = []
    with review.case_file() as store:
        complaints = store.complaints()
        last_at: dict[int, int] = {}
        for c in complaints:
            last_at[c.address_id] = max(last_at.get(c.address_id, 0), c.received_ns)
        premises = {a.id: a.premises for a in store.addresses()}
        for c in complaints:
            linked = len(store.links(c.id))
            covering: int | None = None
            if not linked:
                try:
                    covering = len(candidate_windows(review.client, c,
                                                     store.placements(c.address_id)))
                except AnalyzerError:
                    covering = None
            rows.append(CaseRow(c, premises[c.address_id], c.address_id,
                                not store.dispositions(c.id), last_at[c.address_id], linked,
                                covering))
    rows.sort(key=lambda r: (not r.open, -r.complaint.received_ns))
    return review.render(request, "cases.html", {"rows": rows})


def case_page(review: Review, request: Request, session: OfficerSession,
              refused_form: dict[str, Any] | None = None, status_code: int = 200) -> Response:
    """One complaint: identity (audited), records, findings verified now, the checklist;
    ``refused_form`` (kind, message, typed): a record form shown again with its error."""
    complaint_id = int(request.path_params["complaint"])
    with review.case_file() as store:
        view = read_case(store, complaint_id, review.client, review.verifier)
        _audit_identity(store, session, request, [complaint_id])
    checked = {c.link.id: review.verifier.checked_ns(c.link) for c in view.checks}
    return review.render(request, "case.html", {
        "view": view, "checked": checked, "contact_outcomes": CONTACT_OUTCOMES,
        "exception_kinds": EXCEPTION_KINDS, "dispositions": DISPOSITIONS,
        "max_note_chars": MAX_NOTE_CHARS, "conditions": ATTESTED,
        **({"refused": refused_form} if refused_form else {})}, status_code)


def report_html(review: Review, request: Request, session: OfficerSession) -> Response:
    """The evidence report as ``barkwatch report`` writes it, shown in the browser (made in a
    renderer process, as the PDF)."""
    return _report(review, request, session, html_only=True)


def report_pdf(review: Review, request: Request, session: OfficerSession) -> Response:
    """The same report as PDF (WeasyPrint renders the same HTML, as ``barkwatch report``)."""
    return _report(review, request, session, html_only=False)


def _report(review: Review, request: Request, session: OfficerSession,
            html_only: bool) -> Response:
    """The report, gathered and rendered in a renderer process bounded in number and time
    (:mod:`renders`): 503 when all places are taken (before any work), 504 past the time
    limit, stopped when the browser goes away. The identity views are audited here."""
    from analyzer.reports.pdf import ReportJob

    try:
        ticket = review.renders.reserve()
    except RenderRefused as exc:
        return LateResponse(review.error(request, exc.status, str(exc)),
                            review.settings.limits.busy_answer_delay_s)
    try:
        complaint_id = int(request.path_params["complaint"])
        with review.case_file() as store:
            complaint = store.complaint(complaint_id)
            # The report names the complainant of every complaint at the address (section 8).
            _audit_identity(store, session, request,
                            [c.id for c in store.complaints(complaint.address_id)])
    except BaseException:
        ticket.release()
        raise
    job = ReportJob(review.settings.cases_db, complaint_id, review.settings.influx,
                    review.clock(), html_only, paper=review.settings.report.paper)
    headers = ({"Content-Security-Policy": REPORT_CSP, "Cache-Control": "no-store"}
               if html_only else
               {"Content-Disposition": f'inline; filename="complaint-{complaint_id}.pdf"',
                "Cache-Control": "no-store"})
    return ticket.response(job, headers,
                           lambda status, message: review.error(request, status, message))


def _link(store: CaseStore, complaint_id: int, link_id: int) -> Any:
    store.complaint(complaint_id)
    for link in store.links(complaint_id):
        if link.id == link_id:
            return link
    raise CaseError(f"complaint {complaint_id} has no evidence link {link_id}")


def _calibration(review: Review, device_id: str, start_ns: int,
                 end_ns: int) -> tuple[list[str], list[float]]:
    where = f"{device_clause(device_id)} AND time >= {start_ns} AND time <= {end_ns}"
    dates = review.client.query(f"SELECT DISTINCT(calibration_date) FROM level WHERE {where}")
    scales = review.client.query(f"SELECT DISTINCT(full_scale_db) FROM level WHERE {where}")
    return (sorted(str(v[1]) for s in dates for v in s["values"] if v[1]),
            sorted(float(v[1]) for s in scales for v in s["values"] if v[1] is not None))


def finding_page(review: Review, request: Request, session: OfficerSession,
                 refused_verdict: dict[str, Any] | None = None,
                 status_code: int = 200) -> Response:
    """One linked finding: the elements of the violation, the interactive plot and its
    events with their verdicts (:mod:`events`; ``refused_verdict``: a verdict form again)."""
    from analyzer.reports import WindowEvidence, element_rows
    from analyzer.reports.bearings import bearings_plot
    from analyzer.review.events import events_context

    complaint_id = int(request.path_params["complaint"])
    with review.case_file() as store:
        link = _link(store, complaint_id, int(request.path_params["link"]))
        complaint = store.complaint(complaint_id)
    check = review.verifier([link])[0]
    events = load_events(review.client, link.device_id, link.start_ns, link.end_ns)
    dates, scales = _calibration(review, link.device_id, link.start_ns, link.end_ns)
    evidence = WindowEvidence(check, events, [], dates, scales)
    parameters = (check.fields or {}).get("parameters", {})
    limit = parameters.get("continuous_limit_s" if link.rule == "continuous"
                           else "intermittent_limit_s")
    pad_ns = max(120 * NS, (link.end_ns - link.start_ns) // 10)
    plot = {"url": f"/cases/{complaint_id}/findings/{link.id}/data",
            "start_ms": (link.start_ns - pad_ns) // MS, "end_ms": (link.end_ns + pad_ns) // MS,
            "finding_start_ms": link.start_ns // MS, "finding_end_ms": link.end_ns // MS,
            "rule": link.rule, "limit_s": float(limit) if limit is not None else None}
    return review.render(request, "finding.html", {
        "complaint": complaint, "link": link, "check": check,
        "checked_ns": review.verifier.checked_ns(link),
        "rows": element_rows(evidence) if check.fields else [],
        "bearing_plot": bearings_plot(evidence) if check.fields else None,
        "plot_json": json.dumps(plot),
        **events_context(review, link, check, events, refused_verdict)}, status_code)


def _ms_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise QueryInputError(f"query parameter {name}={raw!r} is not a time in ms") from exc


def finding_data(review: Review, request: Request, session: OfficerSession) -> Response:
    """The plot's data for [from, to) (ms since the epoch), downsampled by InfluxDB; at most
    ``[limits]`` queries_per_officer / queries_in_all at a time (503 at once past them, before
    the case file is opened)."""
    try:
        return review.plot_queries.answer(session.officer, lambda: _finding_data(review, request),
                                          lambda refusal: review.busy(request, refusal))
    except RollupMissing as exc:
        return review.error(request, 503, f"Not answered: {exc}.")


def _finding_data(review: Review, request: Request) -> Response:
    complaint_id = int(request.path_params["complaint"])
    with review.case_file() as store:
        link = _link(store, complaint_id, int(request.path_params["link"]))
    pad_ns = max(120 * NS, (link.end_ns - link.start_ns) // 10)
    start_ns = _ms_param(request, "from", (link.start_ns - pad_ns) // MS) * MS
    end_ns = _ms_param(request, "to", (link.end_ns + pad_ns) // MS) * MS
    if not MIN_PLOT_SPAN_NS <= end_ns - start_ns <= MAX_PLOT_SPAN_NS:
        raise QueryInputError(f"a plot spans {MIN_PLOT_SPAN_NS // NS} s to "
                              f"{MAX_PLOT_SPAN_NS // NS // 86400} days; asked "
                              f"{(end_ns - start_ns) / NS:.0f} s")
    data = plot_data(review.client, link.device_id, start_ns, end_ns,
                     review.settings.plot_points, review.settings.limits.rollup_from_s)
    return JSONResponse(data.as_json(), headers={"Cache-Control": "no-store"})


def devices_page(review: Review, request: Request, session: OfficerSession,
                 refused_form: dict[str, Any] | None = None, status_code: int = 200
                 ) -> Response:
    """The devices placed at an address: online, last frame, calibration, coverage; the
    forms that place a device and remove one (``refused_form``: one shown again)."""
    from analyzer.acoustics.site import GROUND_FACTORS
    from analyzer.review.fieldcheck import placement_sector, placement_state

    address_id = int(request.path_params["address"])
    now = review.clock()
    with review.case_file() as store:
        address = store.address(address_id)
        placements = store.placements(address_id)
    states = [(p, *placement_state(review, p, now)) for p in placements]
    return review.render(request, "devices.html", {
        "address": address, "states": states, "now_ns": now, "grounds": tuple(GROUND_FACTORS),
        "sectors": {p.id: placement_sector(p.site_record) for p in placements},
        **({"refused": refused_form} if refused_form else {})}, status_code)
