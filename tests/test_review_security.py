"""Issue 33, the review application under attack: each defect's regression, against the real
server (uvicorn on a free loopback port, real InfluxDB, real case file) of
tests/test_review_http.py."""

from __future__ import annotations

from analyzer.cases import CaseFile, add_account, disable_account
from analyzer.review import hash_password
from tests.test_review_http import PASSWORD, Browser, Server, server

__all__ = ["server"]  # the module-scoped server fixture, one for this module


def _new_account(server: Server, username: str) -> None:
    with CaseFile(server.case.db) as store:
        add_account(store, username, f"Ofc. {username.title()}", hash_password(PASSWORD),
                    "admin")


def test_a_disabled_account_loses_its_open_session_at_the_next_request(server: Server) -> None:
    _new_account(server, "dis")
    browser = Browser(server.base)
    assert browser.sign_in(PASSWORD, "dis")[0] == 303
    assert browser.request("/cases")[0] == 200
    with CaseFile(server.case.db) as store:
        disable_account(store, "dis", "admin")
    status, location, _ = browser.request(f"/cases/{server.case.complaint}")
    assert (status, location) == (303, f"/signin?next=/cases/{server.case.complaint}")
    status, location, _ = browser.request(f"/cases/{server.case.complaint}/record/observation",
                                          {"csrf_token": browser.token, "note": "after"})
    assert (status, location) == (303, "/signin")
    with CaseFile(server.case.db) as store:
        assert not store.observations(server.case.complaint) or all(
            o.notes != "after" for o in store.observations(server.case.complaint))


def test_a_changed_password_ends_the_sessions_opened_with_the_old_one(server: Server) -> None:
    _new_account(server, "chg")
    browser = Browser(server.base)
    assert browser.sign_in(PASSWORD, "chg")[0] == 303
    with CaseFile(server.case.db) as store:
        store.db.execute("UPDATE officer_accounts SET password_hash = ? WHERE username = ?",
                         (hash_password("another long password"), "chg"))
    assert browser.request("/cases")[0] == 303
