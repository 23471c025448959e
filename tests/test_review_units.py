"""The review application's parts without a server or a browser: officers' accounts in the
case file, the audit of what they read, the sign-in limiter, plot intervals and Chicago days."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.cases import (
    CaseError,
    CaseFile,
    add_account,
    disable_account,
    find_account,
    parse_local_time,
)
from analyzer.review.context import ago, percent
from analyzer.review.passwords import hash_password, verify_password
from analyzer.review.queries import chicago_midnight_ns, interval_s
from analyzer.review.ratelimit import LoginLimiter

NS = 1_000_000_000


def test_an_account_stores_an_argon2_hash_and_its_audit_entry_never_holds_it(
        tmp_path: Path) -> None:
    digest = hash_password("correct horse battery")
    with CaseFile(tmp_path / "cases.sqlite") as store:
        number = add_account(store, "lund", "Ofc. Lund", digest, "admin")
        account = find_account(store, "lund")
        entries = store.audit()
    assert account is not None and account.id == number and account.active
    assert account.password_hash.startswith("$argon2id$")
    assert "correct horse" not in account.password_hash
    assert verify_password(account.password_hash, "correct horse battery")
    assert not verify_password(account.password_hash, "correct horse batterY")
    assert [(e.actor, e.action, e.entity) for e in entries] == [
        ("admin", "add officer account", "officer_accounts")]
    assert "argon2" not in entries[0].detail and "Ofc. Lund" in entries[0].detail


def test_a_taken_or_malformed_user_name_is_refused_by_name(tmp_path: Path) -> None:
    with CaseFile(tmp_path / "cases.sqlite") as store:
        add_account(store, "lund", "Ofc. Lund", hash_password("pw-one-two"), "admin")
        with pytest.raises(CaseError, match="'lund' is taken"):
            add_account(store, "lund", "Ofc. Other", hash_password("pw-one-two"), "admin")
        with pytest.raises(CaseError, match="user name 'Lund Smith'"):
            add_account(store, "Lund Smith", "Ofc. Lund", hash_password("pw-one-two"), "admin")
        with pytest.raises(CaseError, match="never a password"):
            add_account(store, "kay", "Ofc. Kay", "plain text", "admin")


def test_a_disabled_account_stays_with_its_history(tmp_path: Path) -> None:
    with CaseFile(tmp_path / "cases.sqlite") as store:
        add_account(store, "lund", "Ofc. Lund", hash_password("pw-one-two"), "admin")
        disable_account(store, "lund", "admin")
        account = find_account(store, "lund")
        actions = [e.action for e in store.audit()]
    assert account is not None and not account.active
    assert actions == ["add officer account", "disable officer account"]


def test_record_access_writes_one_entry_per_complaint_in_one_go(tmp_path: Path) -> None:
    with CaseFile(tmp_path / "cases.sqlite") as store:
        address = store.add_address("12 Elm St", "Ofc. Lund")
        first = store.open_complaint(address, "Ann", "555", 10 * NS, 0, 20 * NS, True, "Ofc. Lund")
        second = store.open_complaint(address, "Bo", "556", 30 * NS, 0, 40 * NS, True,
                                      "Ofc. Lund")
        store.record_access("Ofc. Kay", "view complainant identity", "complaints",
                            [first, second], {"page": "/cases/2"})
        views = [e for e in store.audit() if e.action == "view complainant identity"]
        about_first = [e.action for e in store.audit(first)]
    assert [(e.actor, e.entity_id) for e in views] == [("Ofc. Kay", first), ("Ofc. Kay", second)]
    assert about_first == ["open complaint", "view complainant identity"]


def test_the_limiter_delays_an_account_from_one_address_with_a_doubling_capped_wait() -> None:
    limiter = LoginLimiter(max_failures_per_account=3, max_failures_per_address=100,
                           window_s=900.0, delay_s=1.0, max_delay_s=4.0)
    for i in range(3):
        assert limiter.refusal("lund", "127.0.0.1", now_s=float(i)) is None
        limiter.failed("lund", "127.0.0.1", now_s=float(i))
    refusal = limiter.refusal("lund", "127.0.0.1", now_s=2.5)
    assert refusal is not None and "unlock-user lund" in refusal
    assert limiter.refusal("lund", "127.0.0.1", now_s=3.0) is None  # 1 s after the 3rd
    limiter.failed("lund", "127.0.0.1", now_s=3.0)
    assert limiter.refusal("lund", "127.0.0.1", now_s=4.9) is not None  # now 2 s
    assert limiter.refusal("lund", "127.0.0.1", now_s=5.0) is None
    for t in (5.0, 9.0, 13.0):
        limiter.failed("lund", "127.0.0.1", now_s=t)
    assert limiter.refusal("lund", "127.0.0.1", now_s=16.9) is not None  # capped at 4 s
    assert limiter.refusal("lund", "127.0.0.1", now_s=17.0) is None


def test_an_attackers_failures_do_not_hold_back_the_account_from_another_address() -> None:
    limiter = LoginLimiter(max_failures_per_account=3, max_failures_per_address=100,
                           window_s=900.0)
    for i in range(50):
        limiter.failed("lund", "203.0.113.9", now_s=float(i))
    assert limiter.refusal("lund", "203.0.113.9", now_s=50.0) is not None
    assert limiter.refusal("lund", "127.0.0.2", now_s=50.0) is None


def test_an_unlock_clears_the_failures_recorded_before_it() -> None:
    limiter = LoginLimiter(max_failures_per_account=1, max_failures_per_address=100,
                           window_s=900.0)
    limiter.failed("lund", "10.0.0.1", now_s=1.0)
    assert limiter.refusal("lund", "10.0.0.1", now_s=1.5) is not None
    assert limiter.unlock("lund", unlocked_s=0.5) is False  # an older unlock: no effect
    assert limiter.unlock("lund", unlocked_s=1.2) is True
    assert limiter.refusal("lund", "10.0.0.1", now_s=1.5) is None


def test_refusals_of_an_address_are_audited_once_per_window_and_counted_when_it_closes(
        ) -> None:
    limiter = LoginLimiter(max_failures_per_account=1, max_failures_per_address=1,
                           window_s=60.0)
    opened = [t for t in range(1000) if limiter.refused("10.0.0.9", now_s=float(t))]
    assert opened == list(range(0, 1000, 60))  # one row a minute, 1000 asks
    closed = limiter.closed_windows(now_s=999.0)
    assert [(w.start_s, w.unrecorded) for w in closed] == \
        [(float(t), 59) for t in range(0, 960, 60)]
    assert limiter.closed_windows(now_s=999.0) == []  # each window once
    assert [(w.start_s, w.unrecorded) for w in
            limiter.closed_windows(now_s=999.0, everything=True)] == [(960.0, 39)]
    assert limiter.closed_windows(now_s=2000.0, everything=True) == []


def test_an_address_refused_once_in_a_window_needs_no_summary() -> None:
    limiter = LoginLimiter(max_failures_per_account=1, max_failures_per_address=1,
                           window_s=60.0)
    assert limiter.refused("10.0.0.9", now_s=0.0)
    assert limiter.closed_windows(now_s=100.0) == []


def test_the_limiter_refuses_an_address_that_tries_many_accounts() -> None:
    limiter = LoginLimiter(max_failures_per_account=5, max_failures_per_address=4,
                           window_s=60.0)
    for i in range(4):
        limiter.failed(f"guess{i}", "10.0.0.9", now_s=1.0)
    refusal = limiter.refusal("lund", "10.0.0.9", now_s=1.5)
    assert refusal is not None and "address" in refusal
    assert limiter.refusal("lund", "10.0.0.8", now_s=1.5) is None


def test_a_successful_sign_in_clears_the_accounts_failures() -> None:
    limiter = LoginLimiter(max_failures_per_account=2, max_failures_per_address=100,
                           window_s=60.0)
    limiter.failed("lund", "127.0.0.1", now_s=1.0)
    limiter.succeeded("lund")
    limiter.failed("lund", "127.0.0.1", now_s=2.0)
    assert limiter.refusal("lund", "127.0.0.1", now_s=3.0) is None


@pytest.mark.parametrize(("span_s", "points", "expected_s"), [
    (840, 1500, 1), (6000, 1500, 5), (7 * 86400, 1500, 600), (7 * 86400, 100, 7200),
    (400 * 86400, 100, 86400)])
def test_the_plot_interval_is_the_finest_that_keeps_to_the_point_budget(
        span_s: int, points: int, expected_s: int) -> None:
    assert interval_s(span_s * NS, points) == expected_s


def test_chicago_days_start_at_local_midnight_and_the_day_clocks_go_back_lasts_25_hours(
        ) -> None:
    assert chicago_midnight_ns(parse_local_time("2026-06-01 23:59")) == \
        parse_local_time("2026-06-01 00:00")
    start = chicago_midnight_ns(parse_local_time("2026-11-01 12:00"))
    end = chicago_midnight_ns(start + 26 * 3600 * NS)
    assert (end - start) // NS == 25 * 3600


def test_ages_and_small_percentages_read_as_an_officer_expects() -> None:
    assert [ago(s) for s in (42, 720, 18000, 15775497)] == ["42 s", "12 min", "5.0 h",
                                                           "183 days"]
    assert [percent(f) for f in (0.0, 0.0004, 0.5, 1.0)] == ["0.0 %", "0.04 %", "50.0 %",
                                                             "100.0 %"]
