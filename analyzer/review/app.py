"""The review application's wiring: routes, the signed-in guard, CSRF on every POST, security
headers and error pages. Pages are in :mod:`pages`, the forms that record in :mod:`recording`.

Handlers do blocking I/O (SQLite, InfluxDB over HTTP), so they run in Starlette's thread
pool; each request opens the case file for itself (SQLite connections stay in one thread).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from analyzer.cases import ADMINISTRATOR, OFFICER, CaseError, account_by_id
from analyzer.errors import AnalyzerError, InfluxUnavailable
from analyzer.review import (
    administration,
    fieldcheck,
    overview,
    pages,
    recording,
    signin,
    workflow,
)
from analyzer.review.context import HERE, Review, client_address
from analyzer.review.sessions import CSRF_FIELD, OfficerSession, csrf_matches, still_valid
from analyzer.review.settings import ReviewSettings, session_key
from analyzer.review.verdicts import set_verdict

log = logging.getLogger(__name__)
COOKIE = "barkwatch_review"
# Pages load their CSS and script from this server only; the report (inline CSS, data: PNGs)
# sets its own policy.
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")


PageHandler = Callable[[Review, Request, OfficerSession], Response]
FormHandler = Callable[[Review, Request, OfficerSession | None, FormData], Response]


def _review(request: Request) -> Review:
    review: Review = request.app.state.review
    return review


def _account_still_valid(review: Review, session: OfficerSession) -> bool:
    with review.case_file() as store:
        return still_valid(session, account_by_id(store, session.account_id))


async def _signed_in(request: Request) -> OfficerSession | None:
    """The request's live session, checked against its account in the case file on every
    request: a disabled account or a changed password ends it (issue 33)."""
    review = _review(request)
    session = review.sessions.find(request.session.get("sid"))
    if session is not None and not await run_in_threadpool(_account_still_valid, review,
                                                           session):
        log.warning("session of %s ended: account disabled, password or role changed",
                    session.username)
        review.sessions.close(session.sid)
        session = None
    if session is None:
        request.session.pop("sid", None)
    request.state.officer = session
    return session


# What each role may do that the other may not (issue 33: every account could do everything).
ROLE_REFUSALS = {
    OFFICER: "Only an officer's account records evidence; an administrator's account "
             "manages accounts and views cases.",
    ADMINISTRATOR: "Only an administrator's account manages accounts and addresses.",
}


def _refused_role(review: Review, request: Request, session: OfficerSession,
                  role: str | None) -> Response | None:
    """A 403 saying why, when the route needs another role than the session's."""
    if role is None or session.role == role:
        return None
    log.warning("%s %s refused: %s is an %s", request.method, request.url.path,
                session.username, session.role)
    return review.error(request, 403, ROLE_REFUSALS[role])


def _with_page_place(handler: PageHandler, review: Review, request: Request,
                     session: OfficerSession) -> Response:
    """``handler`` holding a place of the page-query gate."""
    return review.gated(request, session, lambda: handler(review, request, session))


def page(handler: PageHandler, role: str | None = None,
         queries: bool = False) -> Callable[[Request], Any]:
    """A GET route for signed-in accounts (of ``role`` when given); anyone else is sent to
    sign in. ``queries``: the page queries InfluxDB, so it takes a place of the page gate."""
    async def endpoint(request: Request) -> Response:
        session = await _signed_in(request)
        if session is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/signin?next={quote(target)}", status_code=303)
        refused = _refused_role(_review(request), request, session, role)
        if refused is not None:
            return refused
        if queries:
            return await run_in_threadpool(_with_page_place, handler, _review(request),
                                           request, session)
        return await run_in_threadpool(handler, _review(request), request, session)
    return endpoint


def form(handler: FormHandler, signed_in: bool = True,
         role: str | None = None) -> Callable[[Request], Any]:
    """A POST route: refused unless the form carries the session's CSRF token (and, when
    ``signed_in``, the officer is signed in; when ``role`` is given, with that role)."""
    async def endpoint(request: Request) -> Response:
        review = _review(request)
        data = await request.form()
        session = await _signed_in(request)
        if not csrf_matches(request.session, data.get(CSRF_FIELD)):
            log.warning("POST %s from %s refused: missing or wrong CSRF token",
                        request.url.path, client_address(request))
            if session is not None:
                await run_in_threadpool(signin.audit_refused_form, review, request, session)
            return review.error(request, 403, "The form was refused: its security token is "
                                "missing or out of date (CSRF protection). Reload the page and "
                                "send it again.")
        if signed_in and session is None:
            return RedirectResponse("/signin", status_code=303)
        refused = None if session is None else _refused_role(review, request, session, role)
        if refused is not None:
            return refused
        return await run_in_threadpool(handler, review, request, session, data)
    return endpoint


class CaseId(Convertor[int]):
    """A record id in a path: up to 18 digits, so it fits SQLite's 64-bit integer (issue 33:
    ids at or above 2^63 gave a 500); longer is no route, a 404."""

    regex = "[0-9]{1,18}"

    def convert(self, value: str) -> int:
        return int(value)

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("id", CaseId())


class BodyTooLarge(Exception):
    """A request body past the bound (raised from ``receive``; answered 413)."""


class BodyLimit:
    """Refuses a request body past ``max_bytes`` before anything parses it (issue 33: 180 MB
    of form fields were read before the CSRF check): 413 for a Content-Length over the bound
    or once the streamed bytes pass it; 415 for multipart/form-data, which no form here
    sends (a 200 MB file was spooled to disk before the 403)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if headers.get(b"content-type", b"").lower().startswith(b"multipart/"):
            await _plain(send, 415, "multipart/form-data is not accepted here")
            return
        length = headers.get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.max_bytes:
            await _plain(send, 413, f"the request body is over {self.max_bytes} bytes")
            return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)
        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await _plain(send, 413, f"the request body is over {self.max_bytes} bytes")


async def _plain(send: Send, status: int, text: str) -> None:
    """A short plain-text answer sent from middleware (security headers are added outside)."""
    body = f"{status}: {text}\n".encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class SecurityHeaders:
    """Adds the content security policy and related headers to every response (HSTS and
    Secure cookies when served over TLS), also to the 500 of an unexpected error, which it
    answers itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                extra = [(b"content-security-policy", CSP.encode()),
                         (b"x-content-type-options", b"nosniff"),
                         (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY")]
                if scope.get("scheme") == "https":
                    extra.append((b"strict-transport-security", b"max-age=31536000"))
                    # Served over TLS (uvicorn's own, or a trusted proxy's X-Forwarded-Proto):
                    # the session cookie is Secure without secure_cookies (issue 33).
                    headers = [(n, _secure_cookie(v) if n.lower() == b"set-cookie" else v)
                               for n, v in headers]
                headers += [(n, v) for n, v in extra if n not in names]
                message["headers"] = headers
                started = True
            await send(message)
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                await _plain(send_with_headers, 500, "the server failed on this request")


def _secure_cookie(value: bytes) -> bytes:
    """A Set-Cookie value marked Secure (unchanged when it already is)."""
    attributes = [part.strip().lower() for part in value.split(b";")[1:]]
    return value if b"secure" in attributes else value + b"; secure"


async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    return _review(request).error(request, status, "There is no such page." if status == 404
                                  else str(getattr(exc, "detail", exc)))


async def _case_error(request: Request, exc: Exception) -> Response:
    return _review(request).error(request, 404, f"Not in the case file: {exc}")


async def _influx_down(request: Request, exc: Exception) -> Response:
    log.error("InfluxDB unavailable: %s", exc)
    return _review(request).error(request, 503, f"The evidence database cannot be reached "
                                  f"now: {exc}")


async def _analyzer_error(request: Request, exc: Exception) -> Response:
    return _review(request).error(request, 400, str(exc))


def create_app(settings: ReviewSettings, clock: Callable[[], int] = time.time_ns) -> Starlette:
    """The ASGI application (``uvicorn`` serves it: :func:`analyzer.review.server.serve`)."""
    routes = [
        Route("/", lambda request: RedirectResponse("/overview", status_code=303)),
        Route("/overview", page(overview.overview_page, queries=True)),
        Route("/signin", signin.sign_in_page, methods=["GET"]),
        Route("/signin", form(signin.sign_in, signed_in=False), methods=["POST"]),
        Route("/signout", form(signin.sign_out), methods=["POST"]),
        Route("/cases", page(pages.cases_page, queries=True)),
        Route("/cases/{complaint:id}", page(pages.case_page, queries=True)),
        Route("/cases/{complaint:id}/report.html", page(pages.report_html)),
        Route("/cases/{complaint:id}/report.pdf", page(pages.report_pdf)),
        Route("/cases/{complaint:id}/findings/{link:id}", page(pages.finding_page,
                                                                queries=True)),
        Route("/cases/{complaint:id}/findings/{link:id}/data", page(pages.finding_data)),
        Route("/cases/{complaint:id}/findings/{link:id}/verdict",
              form(set_verdict, role=OFFICER), methods=["POST"]),
        Route("/addresses/{address:id}/devices", page(pages.devices_page, queries=True)),
        Route("/cases/{complaint:id}/record/{kind:str}", form(recording.record, role=OFFICER),
              methods=["POST"]),
        Route("/cases/new", page(workflow.new_complaint_page, role=OFFICER)),
        Route("/cases/new", form(workflow.open_complaint, role=OFFICER), methods=["POST"]),
        Route("/cases/{complaint:id}/link", form(workflow.link_evidence, role=OFFICER),
              methods=["POST"]),
        Route("/addresses", page(workflow.addresses_page)),
        Route("/addresses", form(workflow.add_address, role=ADMINISTRATOR), methods=["POST"]),
        Route("/addresses/{address:id}/place", form(workflow.place_device, role=OFFICER),
              methods=["POST"]),
        Route("/addresses/{address:id}/placements/{placement:id}/live",
              page(fieldcheck.live_data, queries=True)),
        Route("/addresses/{address:id}/placements/{placement:id}/remove",
              form(workflow.remove_device, role=OFFICER), methods=["POST"]),
        Route("/addresses/{address:id}/placements/{placement:id}/sector",
              form(workflow.set_sector, role=OFFICER), methods=["POST"]),
        Route("/accounts", page(administration.accounts_page, role=ADMINISTRATOR)),
        Route("/accounts/{account:id}/{action:str}",
              form(administration.account_action, role=ADMINISTRATOR), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(BodyLimit, max_bytes=settings.max_body_bytes),
        Middleware(SessionMiddleware, secret_key=session_key(settings), session_cookie=COOKIE,
                   max_age=settings.session_max_s, same_site="strict",
                   https_only=settings.secure_cookies or bool(settings.ssl_certfile)),
    ]
    review = Review(settings, clock)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(signin.audit_refusals_at_shutdown, review)

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={HTTPException: _not_found, CaseError: _case_error,
                                        InfluxUnavailable: _influx_down,
                                        AnalyzerError: _analyzer_error})
    app.state.review = review
    return app
