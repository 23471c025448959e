"""The finding page's verdict form (issue 35, item 2): an officer confirms an event or rejects
it with a reason through the same call as ``barkwatch case verdict``
(:func:`analyzer.cases.verdicts.judge_event`: the verdict and its audit entry in one
transaction); a refused verdict comes back on the finding page, 400, beside its form."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from analyzer.cases import CaseError, CaseStore, EvidenceLink, format_time
from analyzer.cases.verdicts import finding_events, judge_event
from analyzer.review.context import Review
from analyzer.review.limits import QueriesBusy
from analyzer.review.pages import finding_page
from analyzer.review.refusals import LateResponse
from analyzer.review.sessions import OfficerSession

FIELDS = ("onset_ns", "label", "verdict", "reason")  # what the form sends, kept on a refusal


def _text(data: FormData, name: str) -> str:
    value = data.get(name, "")
    return value if isinstance(value, str) else ""


def _link(store: CaseStore, complaint_id: int, link_id: int) -> EvidenceLink:
    for link in store.links(complaint_id):
        if link.id == link_id:
            return link
    raise CaseError(f"complaint {complaint_id} has no evidence link {link_id}")


def set_verdict(review: Review, request: Request, session: OfficerSession | None,
                data: FormData) -> Response:
    """Record the officer's verdict on one event (the form sends its onset and label), then
    back to the finding's events; refused: the finding page again, 400, the error beside the
    form and what was typed kept. The finding's events are read from InfluxDB, so this takes
    a place of the page gate."""
    assert session is not None  # the route requires a signed-in officer
    complaint_id = int(request.path_params["complaint"])
    link_id = int(request.path_params["link"])
    url = f"/cases/{complaint_id}/findings/{link_id}"
    with review.case_file() as store:
        link = _link(store, complaint_id, link_id)  # no such link: 404
    onset_text, label = _text(data, "onset_ns").strip(), _text(data, "label").strip()
    verdict, reason = _text(data, "verdict"), _text(data, "reason")
    try:
        with review.page_queries.place(session.officer):
            try:
                if not onset_text.isdigit() or len(onset_text) > 19:
                    raise CaseError(f"no event of this finding is named {onset_text!r}")
                onset_ns = int(onset_text)
                with review.case_file() as store:
                    number = judge_event(store, link, finding_events(review.client, link),
                                         onset_ns, verdict, reason, session.officer,
                                         label or None)
            except CaseError as exc:
                return _refused(review, request, session, data, f"The verdict was not "
                                f"recorded: {exc}")
    except QueriesBusy as exc:
        return LateResponse(review.error(request, 503, f"Not answered now: {exc}."),
                            review.settings.limits.busy_answer_delay_s)
    request.session["flash"] = {
        "kind": "ok", "text": f"Recorded verdict #{number}: the event at "
        f"{format_time(onset_ns)} {verdict}, as {session.officer}."}
    return RedirectResponse(f"{url}#events", status_code=303)


def _refused(review: Review, request: Request, session: OfficerSession, data: FormData,
             message: str) -> Response:
    """The finding page, 400, with ``message`` beside the event's form (above the table when
    the event is not one of the finding's) and the verdict and reason as typed. The caller
    holds a place of the page gate."""
    typed = {name: _text(data, name) for name in FIELDS}
    refused = {"anchor": f"event-{typed['onset_ns'].strip()}-{typed['label'].strip()}",
               "message": message, "typed": typed}
    return finding_page(review, request, session, refused, 400)
