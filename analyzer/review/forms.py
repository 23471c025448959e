"""What the app's forms share: the values a form sends, and a refused form shown again on its
page, 400, with the reason beside it and what was typed kept (issue 35: a bad entry jumped
away from the form, the error out of view and the entry cleared)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from analyzer.cases import CaseError
from analyzer.review.context import Review
from analyzer.review.sessions import CSRF_FIELD, OfficerSession

# A page that holds forms: (review, request, session, refused form or None, status code).
FormPage = Callable[[Review, Request, OfficerSession, dict[str, Any] | None, int], Response]


def text(data: FormData, name: str) -> str:
    """A field's text ('' when absent or not text)."""
    value = data.get(name, "")
    return value if isinstance(value, str) else ""


def number(data: FormData, name: str, what: str) -> float:
    """A field's number (a decimal point, not a comma); CaseError naming the field if not."""
    raw = text(data, name).strip()
    try:
        value = float(raw)
    except ValueError:
        raise CaseError(f"{what}: {raw!r} is not a number" if raw else f"{what} is missing"
                        ) from None
    if not math.isfinite(value):
        raise CaseError(f"{what}: {raw!r} is not a finite number")
    return value


def typed(data: FormData) -> dict[str, str]:
    """What the form sent, to put back in it (never the CSRF token)."""
    return {name: value for name, value in data.multi_items()
            if isinstance(value, str) and name != CSRF_FIELD}


def shown_again(review: Review, request: Request, session: OfficerSession, page: FormPage,
                kind: str, message: str, data: FormData, queries: bool,
                fallback_url: str) -> Response:
    """``page`` again, 400, with form ``kind`` showing ``message`` and what was typed; a page
    that ``queries`` InfluxDB takes a place of the page gate, and when none is free the
    message goes to ``fallback_url`` as a flash instead."""
    refused = {"kind": kind, "message": message, "typed": typed(data)}

    def show() -> Response:
        return page(review, request, session, refused, 400)

    if not queries:
        return show()

    def busy(_: Exception) -> Response:
        request.session["flash"] = {"kind": "error", "text": message}
        return RedirectResponse(fallback_url, status_code=303)
    return review.page_queries.answer(session.officer, show, busy)


def done(request: Request, message: str, url: str) -> Response:
    """Back to ``url`` (303) with ``message`` shown once."""
    request.session["flash"] = {"kind": "ok", "text": message}
    return RedirectResponse(url, status_code=303)
