"""The seven conditions of subd. 5 ("Seizure of Barking Dog Noise Abatement"), checked over
the case file's records and the complaint's verified findings. Pure: no I/O, no clock.

Each condition is marked by what can show it: 1 and 3 *shown by the records*, 2 *supported by
a finding* (the officer's belief rests on it), 4-7 *for the officer to attest*. Every
condition not met says what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from analyzer.cases.links import LinkCheck
from analyzer.cases.localtime import format_time, local_date
from analyzer.cases.records import (
    FAILED_CONTACT,
    Complaint,
    ContactAttempt,
    OfficerAttestation,
    OfficerException,
)
from analyzer.ordinance.rejudge import Rejudged

RECORDS = "shown by the records"
FINDING = "supported by a finding"
ATTEST = "for the officer to attest"

# Subd. 5, seizure conditions, quoted (ordinance-chapter-7.txt).
CONDITION_TEXT = {
    1: "There is an identified complainant other than the police or animal control officer "
       "making a contemporaneous complaint about the barking.",
    2: "The officer reasonably believes that the barking meets the criteria set forth in "
       "Subdivision 6.A.",
    3: "The officer can demonstrate that there has been at least one previous complaint of a "
       "dog barking at this address on a prior date.",
    4: "The officer has made reasonable attempts to contact the owner of the dog(s) or the "
       "owner of the property and those attempts have either failed or have been ignored.",
    5: "The seizure will not involve forced entry into a private residence.",
    6: "No other less intrusive means to stop the barking is available.",
    7: "Written notice of the seizure is left in a conspicuous place if personal contact with "
       "the owner of the dog is not possible.",
}


@dataclass(frozen=True)
class ChecklistItem:
    """One condition: how it is shown, whether it is, the evidence and what is missing."""

    number: int
    text: str
    basis: str
    met: bool
    evidence: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def same_person(a: str, b: str) -> bool:
    """Names equal after case folding and collapsing spaces."""
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())


def _condition_1(complaint: Complaint) -> ChecklistItem:
    evidence: list[str] = []
    missing: list[str] = []
    evidence.append(f"complainant {complaint.complainant_name} ({complaint.complainant_role}), "
                    f"received {format_time(complaint.received_ns)} by {complaint.officer}")
    if complaint.complainant_role != "resident":
        role = complaint.complainant_role.replace("_", " ")
        missing.append(f"the complainant is recorded as {role}: the condition needs someone "
                       "other than police or animal control")
    if same_person(complaint.complainant_name, complaint.officer):
        missing.append("the complainant is the officer who took the complaint")
    if not complaint.contemporaneous:
        missing.append("the complaint is not recorded as made while the barking went on")
    elif not complaint.span_start_ns <= complaint.received_ns <= complaint.span_end_ns:
        missing.append(f"received {format_time(complaint.received_ns)}, outside the span "
                       "complained about: not contemporaneous")
    return ChecklistItem(1, CONDITION_TEXT[1], RECORDS, not missing, evidence, missing)


def _finding_line(check: LinkCheck) -> str:
    f = check.fields or {}
    limit_key = ("continuous_limit_s" if check.link.rule == "continuous"
                 else "intermittent_limit_s")
    limit = float(f.get("parameters", {}).get(limit_key, "nan"))
    audibility = f.get("audibility", {})
    margins = (f"audibility margin {float(audibility['margin_db_min']):.1f} to "
               f"{float(audibility['margin_db_max']):.1f} dB at 100 ft"
               if audibility.get("margin_db_min") is not None else "audibility not assessed")
    return (f"{check.link.rule} finding on {check.link.device_id}, "
            f"{format_time(check.link.start_ns)} to {format_time(check.link.end_ns)}: "
            f"{float(f.get('duration_s', 'nan')):.0f} s against more than {limit:.0f} s, "
            f"{f.get('events_counted')} events counted, {margins}; digest {check.link.digest}")


def _rejudged_line(check: LinkCheck, again: Rejudged) -> str:
    return (f"without the {again.rejected} event(s) the officer rejected, the "
            f"{check.link.rule} finding of {format_time(check.link.start_ns)} "
            f"{'still holds' if again.holds else 'does not hold'}: longest "
            f"{again.longest_s:.0f} s against more than {again.limit_s:.0f} s, "
            f"{again.events_counted} events counted")


def _condition_2(complaint: Complaint, checks: Sequence[LinkCheck],
                 exceptions: Sequence[OfficerException],
                 rejudged: Mapping[int, Rejudged]) -> ChecklistItem:
    evidence: list[str] = []
    missing: list[str] = []
    covering = [c for c in checks if c.link.start_ns <= complaint.span_end_ns
                and complaint.span_start_ns <= c.link.end_ns]
    verified = [c for c in covering if c.verified]
    evidence.extend(_finding_line(c) for c in verified)
    # Issue 35: an officer's rejected events count against the finding they were in.
    evidence.extend(_rejudged_line(c, rejudged[c.link.id]) for c in verified
                    if c.link.id in rejudged)
    holding = [c for c in verified if c.link.id not in rejudged or rejudged[c.link.id].holds]
    if not covering:
        missing.append("no evidence window covering the span complained about is linked")
    elif not verified:
        missing.append("no linked evidence window verifies now: "
                       + "; ".join(f"{c.link.rule} at {format_time(c.link.start_ns)} "
                                   f"{c.state}" for c in covering))
    elif not holding:
        missing.append("no linked finding holds without the events the officer rejected")
    for exception in exceptions:
        missing.append(f"the officer recorded {exception.kind} ({exception.notes or 'no note'}"
                       f", {format_time(exception.at_ns)}): barking due to harassment, injury "
                       "or trespass is not a violation (subd. 5)")
    return ChecklistItem(2, CONDITION_TEXT[2], FINDING, not missing, evidence, missing)


def _condition_3(complaint: Complaint, history: Sequence[Complaint]) -> ChecklistItem:
    today = local_date(complaint.received_ns)
    earlier = [c for c in history if c.id != complaint.id and c.address_id == complaint.address_id
               and local_date(c.received_ns) < today]
    same_day = [c for c in history if c.id != complaint.id
                and c.address_id == complaint.address_id and local_date(c.received_ns) == today]
    evidence = [f"complaint #{c.id} received {format_time(c.received_ns)}" for c in earlier]
    missing = []
    if not earlier:
        text = f"no complaint at this address on a date before {today} (America/Chicago)"
        if same_day:
            text += f"; {len(same_day)} other complaint(s) the same day do not count"
        missing.append(text)
    return ChecklistItem(3, CONDITION_TEXT[3], RECORDS, not missing, evidence, missing)


def _attested(number: int, attestations: Sequence[OfficerAttestation],
              evidence: list[str], missing: list[str]) -> ChecklistItem:
    mine = [a for a in attestations if a.condition == number]
    evidence = evidence + [f"attested by {a.officer} {format_time(a.at_ns)}"
                           + (f": {a.notes}" if a.notes else "") for a in mine]
    if not mine:
        missing = [*missing, "the officer's attestation"]
    return ChecklistItem(number, CONDITION_TEXT[number], ATTEST, not missing, evidence, missing)


def seizure_checklist(complaint: Complaint, history: Sequence[Complaint],
                      checks: Sequence[LinkCheck], exceptions: Sequence[OfficerException],
                      contacts: Sequence[ContactAttempt],
                      attestations: Sequence[OfficerAttestation],
                      rejudged: Mapping[int, Rejudged] | None = None) -> list[ChecklistItem]:
    """Conditions 1-7 for ``complaint``; ``history`` the complaints at its address (it may
    include the complaint itself), ``checks`` its links as verified now, ``rejudged`` (by
    link id) those findings judged again without the events an officer rejected."""
    contact_lines = [f"{format_time(c.at_ns)} {c.method}: {c.outcome.replace('_', ' ')}"
                     + (f" ({c.notes})" if c.notes else "") for c in contacts]
    contact_missing = []
    if not any(c.outcome in FAILED_CONTACT for c in contacts):
        contact_missing.append("no failed or ignored attempt to contact the owner is recorded")
    if any(c.outcome == "reached" for c in contacts):
        contact_missing.append("an attempt reached the owner: the condition needs attempts "
                               "that failed or were ignored")
    return [
        _condition_1(complaint),
        _condition_2(complaint, checks, exceptions, rejudged or {}),
        _condition_3(complaint, history),
        _attested(4, attestations, contact_lines, contact_missing),
        *(_attested(n, attestations, [], []) for n in (5, 6, 7)),
    ]
