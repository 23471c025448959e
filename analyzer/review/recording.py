"""Recording from the case page: a contact attempt, an observation, an exception or a
disposition, through the same CaseStore calls as ``barkwatch case contact|observe|exception|
dispose`` (each writes its record and audit entry in one transaction), signed by the officer
who is signed in."""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from analyzer.cases import CaseError, CaseStore, TimeInputError, parse_local_time
from analyzer.review.context import Review
from analyzer.review.limits import QueriesBusy
from analyzer.review.sessions import OfficerSession


def _text(data: FormData, name: str) -> str:
    value = data.get(name, "")
    return value if isinstance(value, str) else ""


def _at(data: FormData, now_ns: int) -> int:
    """The form's time (Chicago local unless a zone is given), or now when left empty."""
    text = _text(data, "at").strip()
    return parse_local_time(text, "time") if text else now_ns


FIELDS = ("at", "method", "outcome", "kind", "note")  # what the forms send, kept on an error
# kind -> (what it records, the CaseStore call with the CLI's arguments)
Recorder = Callable[[CaseStore, int, FormData, int, str], int]
RECORDERS: dict[str, tuple[str, Recorder]] = {
    "contact": ("contact attempt", lambda store, c, d, at, officer: store.add_contact_attempt(
        c, at, _text(d, "method"), _text(d, "outcome"), officer, _text(d, "note"))),
    "observation": ("observation", lambda store, c, d, at, officer: store.add_observation(
        c, at, officer, _text(d, "note"))),
    "exception": ("exception", lambda store, c, d, at, officer: store.add_exception(
        c, _text(d, "kind"), at, officer, _text(d, "note"))),
    "disposition": ("disposition", lambda store, c, d, at, officer: store.add_disposition(
        c, _text(d, "kind"), at, officer, _text(d, "note"))),
}


def record(review: Review, request: Request, session: OfficerSession | None,
           data: FormData) -> Response:
    """Write the record, then back to the case page with what happened."""
    assert session is not None  # the route requires a signed-in officer
    complaint_id = int(request.path_params["complaint"])
    kind = str(request.path_params["kind"])
    if kind not in RECORDERS:
        return review.error(request, 404, f"Nothing called {kind!r} can be recorded.")
    what, recorder = RECORDERS[kind]
    try:
        with review.case_file() as store:
            number = recorder(store, complaint_id, data, _at(data, review.clock()),
                              session.officer)
    except (CaseError, TimeInputError) as exc:
        return _refused(review, request, session, kind,
                        f"The {what} was not recorded: {exc}", data)
    request.session["flash"] = {"kind": "ok",
                                "text": f"Recorded {what} #{number} as {session.officer}."}
    return RedirectResponse(f"/cases/{complaint_id}#records", status_code=303)


def _refused(review: Review, request: Request, session: OfficerSession, kind: str,
             message: str, data: FormData) -> Response:
    """The case page again, 400, with the error beside the form and what was typed kept in
    it (issue 35: the page jumped to the records with the error out of view and the entry
    cleared); a busy evidence database falls back to the message alone."""
    from analyzer.review.pages import case_page

    typed = {name: _text(data, name) for name in FIELDS}
    try:
        with review.page_queries.place(session.officer):
            return case_page(review, request, session,
                             {"kind": kind, "message": message, "typed": typed}, 400)
    except QueriesBusy:
        request.session["flash"] = {"kind": "error", "text": message}
        return RedirectResponse(f"/cases/{request.path_params['complaint']}#form-{kind}",
                                status_code=303)
