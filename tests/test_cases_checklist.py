"""The seizure checklist (subd. 5, conditions 1-7) over constructed cases; no services."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from analyzer.cases import (
    ChecklistItem,
    Complaint,
    ContactAttempt,
    EvidenceLink,
    LinkCheck,
    OfficerAttestation,
    OfficerException,
    parse_local_time,
    seizure_checklist,
)
from analyzer.cases.checklist import ATTEST, FINDING, RECORDS
from analyzer.cases.links import FAILS, VERIFIED
from analyzer.ordinance.rejudge import Rejudged

NS = 1_000_000_000
T0 = parse_local_time("2026-06-10 21:00")
DIGEST = "d" * 64
WINDOW = {"duration_s": "485.000000", "events_counted": 25,
          "parameters": {"continuous_limit_s": "420.000000"},
          "audibility": {"margin_db_min": "4.100000", "margin_db_max": "12.300000"}}


def complaint(id_: int = 2, received: str = "2026-06-10 21:10", **changes: Any) -> Complaint:
    base = Complaint(id_, 1, "Ann Neighbour", "555-0101", "resident",
                     parse_local_time(received), T0, T0 + 1800 * NS, True, "Ofc. Lund", "")
    return replace(base, **changes)


def verified_link(state: str = VERIFIED) -> LinkCheck:
    link = EvidenceLink(1, 2, "glencoe-0001", "continuous", T0 + 60 * NS, T0 + 545 * NS, DIGEST,
                        T0, "Ofc. Lund")
    return LinkCheck(link, state, [], WINDOW)


def attested(*conditions: int) -> list[OfficerAttestation]:
    return [OfficerAttestation(n, 2, n, T0 + 3600 * NS, "Ofc. Lund", "") for n in conditions]


FAILED_CALL = [ContactAttempt(1, 2, T0 + 900 * NS, "phone", "no_answer", "Ofc. Lund", "")]
PRIOR = complaint(1, "2026-06-03 20:00")


def check(current: Complaint, history: list[Complaint], checks: list[LinkCheck] | None = None,
          exceptions: list[OfficerException] | None = None,
          contacts: list[ContactAttempt] | None = None,
          attestations: list[OfficerAttestation] | None = None) -> dict[int, ChecklistItem]:
    items = seizure_checklist(current, history, [verified_link()] if checks is None else checks,
                              exceptions or [], FAILED_CALL if contacts is None else contacts,
                              attested(4, 5, 6, 7) if attestations is None else attestations)
    return {item.number: item for item in items}


def test_a_complete_case_meets_all_seven_conditions_each_by_its_own_basis() -> None:
    items = check(complaint(), [PRIOR, complaint()])
    assert all(item.met for item in items.values())
    assert [items[n].basis for n in range(1, 8)] == [
        RECORDS, FINDING, RECORDS, ATTEST, ATTEST, ATTEST, ATTEST]
    (line,) = items[2].evidence
    assert "485 s against more than 420 s" in line and DIGEST in line
    assert "audibility margin 4.1 to 12.3 dB at 100 ft" in line


def test_no_prior_complaint_leaves_condition_3_unmet() -> None:
    item = check(complaint(), [complaint()])[3]
    assert not item.met
    assert item.missing == [
        "no complaint at this address on a date before 2026-06-10 (America/Chicago)"]


def test_a_prior_complaint_the_same_day_does_not_count() -> None:
    earlier_today = complaint(1, "2026-06-10 08:00")
    item = check(complaint(), [earlier_today, complaint()])[3]
    assert not item.met
    assert "1 other complaint(s) the same day do not count" in item.missing[0]


def test_a_prior_complaint_late_the_evening_before_counts_by_chicago_date() -> None:
    # 23:30 CDT on the 9th is already the 10th in UTC: the city's calendar decides.
    item = check(complaint(), [complaint(1, "2026-06-09 23:30"), complaint()])[3]
    assert item.met


def test_a_complainant_who_is_the_officer_does_not_meet_condition_1() -> None:
    current = complaint(complainant_name="ofc.  LUND")
    item = check(current, [PRIOR, current])[1]
    assert not item.met
    assert item.missing == ["the complainant is the officer who took the complaint"]


def test_a_police_complainant_does_not_meet_condition_1() -> None:
    current = complaint(complainant_role="police")
    item = check(current, [PRIOR, current])[1]
    assert not item.met
    assert "recorded as police" in item.missing[0]


def test_a_complaint_received_after_the_barking_is_not_contemporaneous() -> None:
    current = complaint(received="2026-06-11 09:00")
    item = check(current, [PRIOR, current])[1]
    assert not item.met
    assert "outside the span complained about" in item.missing[0]


def test_a_finding_that_no_longer_verifies_does_not_support_condition_2() -> None:
    item = check(complaint(), [PRIOR], checks=[verified_link(FAILS)])[2]
    assert not item.met
    assert "does not verify" in item.missing[0]


def test_no_linked_finding_leaves_condition_2_unmet() -> None:
    item = check(complaint(), [PRIOR], checks=[])[2]
    assert item.missing == [
        "no evidence window covering the span complained about is linked"]


def test_a_recorded_exception_defeats_condition_2() -> None:
    teased = [OfficerException(1, 2, "harassment", T0, "Ofc. Lund", "boys poking the dog")]
    item = check(complaint(), [PRIOR], exceptions=teased)[2]
    assert not item.met
    assert "harassment (boys poking the dog" in item.missing[0]


def test_conditions_4_to_7_wait_for_the_officer_and_4_for_a_failed_contact() -> None:
    items = check(complaint(), [PRIOR], contacts=[], attestations=attested(5))
    assert items[4].missing == [
        "no failed or ignored attempt to contact the owner is recorded",
        "the officer's attestation"]
    assert items[5].met
    assert [items[n].missing for n in (6, 7)] == [
        ["the officer's attestation"]] * 2


def _rejudged(holds: bool) -> Rejudged:
    return Rejudged("continuous", rejected=3, holds=holds, longest_s=421.0 if holds else 401.0,
                    events_counted=22 if holds else 21, parts_holding=int(holds),
                    limit_s=420.0)


def test_condition_2_rests_on_the_finding_without_the_events_the_officer_rejected() -> None:
    current = complaint()
    still = {item.number: item for item in seizure_checklist(
        current, [PRIOR, current], [verified_link()], [], FAILED_CALL, attested(4, 5, 6, 7),
        {1: _rejudged(True)})}
    assert still[2].met
    assert still[2].evidence[1] == (
        "without the 3 event(s) the officer rejected, the continuous finding of "
        "2026-06-10 21:01:00 CDT (2026-06-11 02:01:00 UTC) still holds: longest 421 s "
        "against more than 420 s, 22 events counted")
    gone = {item.number: item for item in seizure_checklist(
        current, [PRIOR, current], [verified_link()], [], FAILED_CALL, attested(4, 5, 6, 7),
        {1: _rejudged(False)})}
    assert not gone[2].met
    assert gone[2].missing == [
        "no linked finding holds without the events the officer rejected"]
    assert "does not hold: longest 401 s" in gone[2].evidence[1]
