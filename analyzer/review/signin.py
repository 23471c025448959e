"""Signing in and out: argon2 check, limits per account and address, every attempt audited."""

from __future__ import annotations

import logging

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from analyzer.cases import USERNAME_PATTERN, CaseStore, find_account
from analyzer.review.context import Review, client_address
from analyzer.review.passwords import burn_time, verify_password
from analyzer.review.sessions import NS, OfficerSession, csrf_token

log = logging.getLogger(__name__)
ACCOUNTS = "officer_accounts"
UNLOCKED = "unlock officer account"  # written by barkwatch review unlock-user
REFUSALS_SUMMARISED = "sign-in refusals summarised"  # a window's rate-limited count
UNKNOWN_NAME = "(unknown name)"  # what the audit says for a name that is no account
NOBODY = "(not signed in)"  # the audit log's actor for an attempt with no known account


def _next_path(value: object) -> str:
    """Where to go after signing in: a path on this server only (never another site)."""
    text = str(value or "")
    if text.startswith("/") and not text.startswith("//") and "\\" not in text:
        return text
    return "/overview"


def sign_in_page(request: Request) -> Response:
    """The sign-in form (its CSRF token is made for the anonymous session)."""
    review: Review = request.app.state.review
    request.state.officer = None
    return review.render(request, "signin.html", {"next": _next_path(
        request.query_params.get("next")), "message": ""})


def sign_in(review: Review, request: Request, _: OfficerSession | None,
            data: FormData) -> Response:
    """Check the password; on success open a new session and go on to ``next``."""
    username = str(data.get("username", "")).strip().lower()[:64]
    password = str(data.get("password", ""))
    address = client_address(request)
    now_s = review.clock() / NS
    target = _next_path(data.get("next"))
    request.state.officer = None

    def refuse(status: int, message: str) -> Response:
        return review.render(request, "signin.html", {"next": target, "message": message,
                                                      "username": username}, status)

    with review.case_file() as store:
        account = find_account(store, username) if USERNAME_PATTERN.fullmatch(username) \
            else None
        actor = account.officer if account else NOBODY
        entity = [account.id if account else 0]
        shown_name = username if account else UNKNOWN_NAME  # never a mistyped password
        if account is not None:
            unlocked = store.db.execute(
                "SELECT max(at_ns) FROM audit_log WHERE action = ? AND entity = ? AND "
                "entity_id = ?", (UNLOCKED, ACCOUNTS, account.id)).fetchone()[0]
            if unlocked is not None:
                review.limiter.unlock(username, unlocked / NS)
        audit_closed_refusals(review, store, now_s)
        refusal = review.limiter.refusal(username, address, now_s)
        if refusal is not None:
            if review.limiter.refused(address, now_s):  # the first of this address's window
                store.record_access(actor, "sign-in refused: rate limit", ACCOUNTS, entity,
                                    {"username": shown_name, "client": address})
            return refuse(429, f"Sign-in refused: {refusal}.")
        if account is not None and account.active:
            accepted = verify_password(account.password_hash, password)
        else:
            burn_time(password)  # as long as a wrong password: no hint which names exist
            accepted = False
        if not accepted:
            review.limiter.failed(username, address, now_s)
            reason = ("wrong password" if account and account.active else
                      "account disabled" if account else "unknown user name")
            store.record_access(actor, "sign-in refused", ACCOUNTS, entity,
                                {"username": shown_name, "client": address, "reason": reason})
            return refuse(401, "Wrong user name or password.")
        assert account is not None
        review.limiter.succeeded(username, address)
        session = review.sessions.open(account)
        store.record_access(account.officer, "sign in", ACCOUNTS, [account.id],
                            {"username": username, "client": address})
    request.session.clear()  # a fresh cookie: nothing from before sign-in carries over
    request.session["sid"] = session.sid
    csrf_token(request.session)
    return RedirectResponse(target, status_code=303)


def audit_closed_refusals(review: Review, store: CaseStore, now_s: float,
                          everything: bool = False) -> int:
    """One audit row for each address whose window of rate-limited sign-ins has closed
    (every open one with ``everything``: at shutdown), with how many refusals it held beyond
    the one audited as it came; returns the number of rows written."""
    windows = review.limiter.closed_windows(now_s, everything)
    for window in windows:
        store.record_access(NOBODY, REFUSALS_SUMMARISED, ACCOUNTS, [0],
                            {"client": window.address, "refusals_not_recorded":
                             window.unrecorded, "window_start_s": round(window.start_s, 3)})
    return len(windows)


def audit_refusals_at_shutdown(review: Review) -> None:
    """The server stops: the open windows' counts go to the audit log, not lost with the
    process's memory."""
    with review.case_file() as store:
        written = audit_closed_refusals(review, store, review.clock() / NS, everything=True)
    if written:
        log.info("shutdown: %d address(es) had rate-limited sign-ins; counts audited", written)


def sign_out(review: Review, request: Request, session: OfficerSession | None,
             _: FormData) -> Response:
    """End the session on the server and clear the cookie."""
    if session is not None:
        review.sessions.close(session.sid)
        with review.case_file() as store:
            store.record_access(session.officer, "sign out", ACCOUNTS, [session.account_id],
                                {"username": session.username, "client": client_address(request)})
    request.session.clear()
    request.session["flash"] = {"kind": "ok", "text": "Signed out."}
    return RedirectResponse("/signin", status_code=303)


def audit_refused_form(review: Review, request: Request, session: OfficerSession) -> None:
    """A signed-in officer's form without the right CSRF token: refused, and audited."""
    with review.case_file() as store:
        store.record_access(session.officer, "form refused: missing or wrong CSRF token",
                            ACCOUNTS, [session.account_id],
                            {"path": request.url.path, "client": client_address(request)})
