"""What every request handler shares (:class:`Review`: settings, clock, InfluxDB, sessions,
sign-in limits, link checks, templates) and the templates' filters."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from analyzer.cases import CaseFile, format_time, shown_safely
from analyzer.review.limits import QueryGate
from analyzer.review.queries import DailyFrames
from analyzer.review.ratelimit import LoginLimiter
from analyzer.review.refusals import LateResponse
from analyzer.review.renders import Renders
from analyzer.review.sessions import CSRF_FIELD, OfficerSession, SessionRegistry, csrf_token
from analyzer.review.settings import ReviewSettings
from analyzer.review.verification import LinkVerifier
from analyzer.store import InfluxClient

HERE = Path(__file__).resolve().parent
# The audit action of every page that shows a complainant (section 8: identities are personal
# data; each view is in the audit log).
IDENTITY_VIEWED = "view complainant identity"


class Review:
    """What every handler shares: settings, the clock, InfluxDB, sessions, sign-in limits."""

    def __init__(self, settings: ReviewSettings, clock: Callable[[], int] = time.time_ns,
                 ) -> None:
        self.settings = settings
        self.clock = clock
        self.client = InfluxClient(settings.influx)
        self.sessions = SessionRegistry(settings.session_idle_s, settings.session_max_s, clock)
        self.limiter = LoginLimiter(settings.max_failures_per_account,
                                    settings.max_failures_per_address,
                                    settings.failure_window_s, settings.sign_in_delay_s,
                                    settings.sign_in_max_delay_s)
        self.verifier = LinkVerifier(self.client, settings.verification_reuse_s, clock)
        self.day_frames = DailyFrames(self.client, settings.verification_reuse_s, clock)
        limits = settings.limits
        self.renders = Renders(limits.render_workers, limits.render_queue,
                               limits.render_timeout_s)
        self.plot_queries = QueryGate(limits.queries_per_officer, limits.queries_in_all)
        self.page_queries = QueryGate(limits.page_queries_per_officer,
                                      limits.page_queries_in_all, "pages")
        self.templates = Jinja2Templates(directory=HERE / "templates")
        self.templates.env.globals["format_time"] = format_time
        self.templates.env.filters["ago"] = ago
        self.templates.env.filters["percent"] = percent
        # Every value a page shows: control and bidirectional characters (records older
        # than the check at entry may hold them) written as \\uXXXX, never raw (issue 33).
        self.templates.env.finalize = _shown_safely

    def case_file(self) -> CaseFile:
        """The case file, opened for one request."""
        return CaseFile(self.settings.cases_db, self.clock)

    def render(self, request: Request, name: str, context: dict[str, Any],
               status_code: int = 200) -> Response:
        """A page: the template with the officer, the form token and any one-off message."""
        signed_in = getattr(request.state, "officer", None)
        values = {"officer": signed_in, "csrf_field": CSRF_FIELD,
                  "csrf": csrf_token(request.session),
                  "flash": request.session.pop("flash", None),
                  "refused": {"kind": "", "message": "", "typed": {}}, **context}
        return self.templates.TemplateResponse(request, name, values, status_code=status_code,
                                               headers={"Cache-Control": "no-store"})

    def error(self, request: Request, status_code: int, message: str) -> Response:
        """An error page that says what was wrong."""
        return self.render(request, "error.html", {"status": status_code, "message": message},
                           status_code)

    def busy(self, request: Request, refusal: Exception) -> Response:
        """503 saying why, sent ``[limits] busy_answer_delay_s`` late (:mod:`refusals`)."""
        return LateResponse(self.error(request, 503, f"Not answered now: {refusal}."),
                            self.settings.limits.busy_answer_delay_s)

    def gated(self, request: Request, session: OfficerSession,
              call: Callable[[], Response]) -> Response:
        """``call()`` holding a place of the page-query gate ([limits] page_queries_*); a
        late 503 past it (issue 33: only the plot data was bounded)."""
        return self.page_queries.answer(session.officer, call,
                                        lambda refusal: self.busy(request, refusal))


def ago(seconds: float) -> str:
    """``42 s``, ``12 min``, ``5.0 h``, ``182 days``: how long ago, readably."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def percent(fraction: float) -> str:
    """A fraction as a percentage that does not round a little coverage down to nothing."""
    value = 100.0 * fraction
    return f"{value:.1f} %" if value >= 1 or value == 0 else f"{value:.2g} %"


def client_address(request: Request) -> str:
    """The client's address (uvicorn takes it from X-Forwarded-For only for a trusted proxy)."""
    return request.client.host if request.client else "unknown"


def _shown_safely(value: Any) -> Any:
    """A template value as shown: text with its control characters made visible. Markup (a
    macro's output, built from values already shown this way) is left as it is, so it is not
    escaped twice."""
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return shown_safely(value)
