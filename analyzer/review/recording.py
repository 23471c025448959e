"""Recording from the case page: a contact attempt, an observation, an exception, an
attestation of seizure condition 4-7 or a disposition, through the same CaseStore calls as
``barkwatch case contact|observe|exception|attest|dispose`` (each writes its record and audit
entry in one transaction), signed by the officer who is signed in."""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from analyzer.cases import (
    CONDITIONS_TO_ATTEST,
    CaseError,
    CaseStore,
    TimeInputError,
    parse_local_time,
)
from analyzer.review.context import Review
from analyzer.review.forms import done, shown_again, text
from analyzer.review.sessions import OfficerSession


def _at(data: FormData, now_ns: int) -> int:
    """The form's time (Chicago local unless a zone is given), or now when left empty."""
    typed = text(data, "at").strip()
    return parse_local_time(typed, "time") if typed else now_ns


def _condition(data: FormData) -> int:
    """The seizure condition chosen (4-7)."""
    chosen = text(data, "condition").strip()
    if not chosen.isdigit() or int(chosen) not in CONDITIONS_TO_ATTEST:
        raise CaseError("choose the condition attested (4, 5, 6 or 7)")
    return int(chosen)


# kind -> (what it records, the CaseStore call with the CLI's arguments)
Recorder = Callable[[CaseStore, int, FormData, int, str], int]
RECORDERS: dict[str, tuple[str, Recorder]] = {
    "contact": ("contact attempt", lambda store, c, d, at, officer: store.add_contact_attempt(
        c, at, text(d, "method"), text(d, "outcome"), officer, text(d, "note"))),
    "observation": ("observation", lambda store, c, d, at, officer: store.add_observation(
        c, at, officer, text(d, "note"))),
    "exception": ("exception", lambda store, c, d, at, officer: store.add_exception(
        c, text(d, "kind"), at, officer, text(d, "note"))),
    "attestation": ("attestation", lambda store, c, d, at, officer: store.add_attestation(
        c, _condition(d), at, officer, text(d, "note"))),
    "disposition": ("disposition", lambda store, c, d, at, officer: store.add_disposition(
        c, text(d, "kind"), at, officer, text(d, "note"))),
}


def record(review: Review, request: Request, session: OfficerSession | None,
           data: FormData) -> Response:
    """Write the record, then back to the case page with what happened."""
    from analyzer.review.pages import case_page

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
        return shown_again(review, request, session, case_page, kind,
                           f"The {what} was not recorded: {exc}", data, True,
                           f"/cases/{complaint_id}#form-{kind}")
    return done(request, f"Recorded {what} #{number} as {session.officer}.",
                f"/cases/{complaint_id}#records")
