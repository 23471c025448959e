"""Everything recorded about one complaint, its links verified now, and the checklist."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analyzer.cases.checklist import ChecklistItem, seizure_checklist
from analyzer.cases.links import UNCHECKED, LinkCheck, verify_link
from analyzer.cases.records import (
    Address,
    Complaint,
    ContactAttempt,
    Disposition,
    EvidenceLink,
    Observation,
    OfficerAttestation,
    OfficerException,
    Placement,
)
from analyzer.cases.store import CaseStore
from analyzer.errors import AnalyzerError
from analyzer.ordinance.rejudge import Rejudged
from analyzer.store import InfluxClient


@dataclass(frozen=True)
class CaseView:
    """One complaint as read now (links verified against InfluxDB on this read)."""

    complaint: Complaint
    address: Address
    placements: list[Placement]
    history: list[Complaint]  # every complaint at the address, oldest first
    contacts: list[ContactAttempt]
    observations: list[Observation]
    exceptions: list[OfficerException]
    attestations: list[OfficerAttestation]
    dispositions: list[Disposition]
    checks: list[LinkCheck]
    checklist: list[ChecklistItem]
    prior_citations: int  # at the address before the complaint was received


def read_case(store: CaseStore, complaint_id: int, client: InfluxClient | None,
              verify: Callable[[list[EvidenceLink]], list[LinkCheck]] | None = None
              ) -> CaseView:
    """Read the complaint and verify each of its links (``client`` None: links not checked;
    ``verify``: how to verify them instead of one :func:`verify_link` after another)."""
    complaint = store.complaint(complaint_id)
    history = store.complaints(complaint.address_id)
    links = store.links(complaint_id)
    if verify is not None:
        checks = verify(links)
    else:
        checks = [verify_link(client, link) if client is not None
                  else LinkCheck(link, UNCHECKED, ["no InfluxDB given"]) for link in links]
    rejudged = _rejudged(store, client, checks)
    contacts = store.contact_attempts(complaint_id)
    exceptions = store.exceptions(complaint_id)
    attestations = store.attestations(complaint_id)
    return CaseView(
        complaint, store.address(complaint.address_id), store.placements(complaint.address_id),
        history, contacts, store.observations(complaint_id), exceptions, attestations,
        store.dispositions(complaint_id), checks,
        seizure_checklist(complaint, history, checks, exceptions, contacts, attestations,
                          rejudged),
        store.prior_citations(complaint.address_id, complaint.received_ns))


def _rejudged(store: CaseStore, client: InfluxClient | None,
              checks: list[LinkCheck]) -> dict[int, Rejudged]:
    """Each verified finding with events an officer rejected, judged again without them (the
    checklist's condition 2 rests on what holds); none without InfluxDB, and a finding whose
    events cannot be read now is left as sealed (its check already says whether InfluxDB
    answered)."""
    from analyzer.cases.verdicts import REJECTED, current_verdicts, review_events

    found: dict[int, Rejudged] = {}
    if client is None:
        return found
    for check in checks:
        if not check.verified or not any(v.verdict == REJECTED for v in
                                         current_verdicts(store, check.link.id).values()):
            continue
        try:
            review = review_events(store, client, check.link, check.fields)
        except AnalyzerError:
            continue
        if review.rejudged is not None:
            found[check.link.id] = review.rejudged
    return found
