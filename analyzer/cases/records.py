"""The case file's records as frozen dataclasses (times: epoch ns, UTC).

Vocabulary from Glencoe City Code section 701: subd. 5 (barking dogs, exceptions, penalty,
the seven seizure conditions) and subd. 1 P (unreasonably disturb the peace and quiet).
"""

from __future__ import annotations

from dataclasses import dataclass

# Who complained. Subd. 5 seizure cond. 1 wants "an identified complainant other than the
# police or animal control officer".
ROLES = ("resident", "police", "animal_control")
# Subd. 5: "It shall not be a violation ... due to harassment or injury to the dog or a
# trespass upon the premises".
EXCEPTION_KINDS = ("harassment", "injury", "trespass")
# Cond. 4: attempts to reach the owner "have either failed or have been ignored".
CONTACT_OUTCOMES = ("no_answer", "ignored", "refused", "reached")
FAILED_CONTACT = ("no_answer", "ignored", "refused")
DISPOSITIONS = ("warning", "citation", "seizure", "no_action")
CONDITIONS_TO_ATTEST = (4, 5, 6, 7)


@dataclass(frozen=True)
class Address:
    """Premises where a dog is kept; owner or custodian where known."""

    id: int
    premises: str
    owner_name: str
    owner_contact: str
    created_ns: int


@dataclass(frozen=True)
class Placement:
    """A device installed at an address from ``placed_ns`` until ``removed_ns`` (None: still)."""

    id: int
    address_id: int
    device_id: str
    placed_ns: int
    removed_ns: int | None
    site_record: str  # the installation record (TOML text) as it was when placed


@dataclass(frozen=True)
class Complaint:
    """One complaint: who, when it was received, the span complained about, who took it."""

    id: int
    address_id: int
    complainant_name: str
    complainant_contact: str
    complainant_role: str
    received_ns: int
    span_start_ns: int
    span_end_ns: int
    contemporaneous: bool  # the complainant said the barking was going on as they called
    officer: str
    notes: str


@dataclass(frozen=True)
class ContactAttempt:
    """An attempt to reach the dog's owner or the property owner (cond. 4)."""

    id: int
    complaint_id: int
    at_ns: int
    method: str
    outcome: str
    officer: str
    notes: str


@dataclass(frozen=True)
class Observation:
    """What an officer saw or heard."""

    id: int
    complaint_id: int
    at_ns: int
    officer: str
    notes: str


@dataclass(frozen=True)
class OfficerException:
    """Harassment, injury or trespass as the officer recorded it (subd. 5)."""

    id: int
    complaint_id: int
    kind: str
    at_ns: int
    officer: str
    notes: str


@dataclass(frozen=True)
class OfficerAttestation:
    """The officer's statement that a seizure condition (4-7) holds."""

    id: int
    complaint_id: int
    condition: int
    at_ns: int
    officer: str
    notes: str


@dataclass(frozen=True)
class Disposition:
    """Warning, citation, seizure or no action; ``prior_citations`` at the address before it
    (subd. 5: a first violation is a petty misdemeanor)."""

    id: int
    complaint_id: int
    kind: str
    at_ns: int
    officer: str
    notes: str
    prior_citations: int


@dataclass(frozen=True)
class EvidenceLink:
    """A complaint's link to an evidence window in InfluxDB (never a copy of the finding)."""

    id: int
    complaint_id: int
    device_id: str
    rule: str
    start_ns: int
    end_ns: int
    digest: str
    linked_ns: int
    officer: str


@dataclass(frozen=True)
class AuditEntry:
    """One change: who, when, what (append-only)."""

    id: int
    at_ns: int
    actor: str
    action: str
    entity: str
    entity_id: int
    detail: str  # JSON of the values written
