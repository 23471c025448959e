"""The administrator's page: every account, with disable and unlock (issue 33, roles). The
same calls as ``barkwatch review disable-user`` and ``unlock-user``, so the audit log has the
same entries whichever was used."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from analyzer.cases import CaseError, account_by_id, accounts, disable_account, unlock_account
from analyzer.review.context import Review
from analyzer.review.sessions import OfficerSession

ACTIONS = ("disable", "unlock")


def accounts_page(review: Review, request: Request, session: OfficerSession) -> Response:
    """The accounts, in order of creation, with what an administrator may do to each."""
    with review.case_file() as store:
        listed = accounts(store)
    return review.render(request, "accounts.html", {"accounts": listed})


def account_action(review: Review, request: Request, session: OfficerSession | None,
                   _: FormData) -> Response:
    """Disable or unlock one account, then back to the accounts with what happened."""
    assert session is not None  # the route requires a signed-in administrator
    action = str(request.path_params["action"])
    if action not in ACTIONS:
        return review.error(request, 404, f"Accounts can be {' or '.join(ACTIONS)}d, not "
                            f"{action!r}.")
    with review.case_file() as store:
        account = account_by_id(store, int(request.path_params["account"]))
        if account is None:
            return review.error(request, 404, "There is no such account.")
        try:
            if action == "disable":
                if account.id == session.account_id:
                    raise CaseError("an administrator cannot disable their own account here "
                                    "(another administrator, or barkwatch review "
                                    "disable-user, can)")
                disable_account(store, account.username, session.officer)
                text = f"Account {account.username} disabled: its sessions have ended."
            else:
                unlock_account(store, account.username, session.officer)
                text = f"Account {account.username} unlocked: its failed sign-ins are cleared."
            flash = {"kind": "ok", "text": text}
        except CaseError as exc:
            flash = {"kind": "error", "text": f"Account {account.username} unchanged: {exc}"}
    request.session["flash"] = flash
    return RedirectResponse("/accounts", status_code=303)
