"""The case file: one SQLite database (WAL), created readable by its owner only.

Every change is one transaction that writes the record and its audit entry (who, when, what)
together; the audit log refuses UPDATE and DELETE by trigger (schema.py). Records are only
ever added: a correction is a new record, so the file keeps the whole history.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from analyzer.cases.localtime import format_time
from analyzer.cases.records import (
    CONDITIONS_TO_ATTEST,
    CONTACT_OUTCOMES,
    DISPOSITIONS,
    EXCEPTION_KINDS,
    ROLES,
    Address,
    AuditEntry,
    Complaint,
    ContactAttempt,
    Disposition,
    EvidenceLink,
    Observation,
    OfficerAttestation,
    OfficerException,
    Placement,
)
from analyzer.cases.schema import migrate
from analyzer.errors import AnalyzerError
from sensor.wire import DEVICE_ID_PATTERN

log = logging.getLogger(__name__)
T = TypeVar("T")
RULES = ("continuous", "intermittent")
MAX_NOTE_CHARS = 4000  # a record's notes or observation, characters
# A record's time: not before 2000 (no Barkwatch evidence is older) and not more than a day
# after the case file's clock (issue 33: a contact attempt dated 2100 counted for seizure
# condition 4, and times after 2262 do not fit SQLite's 64-bit integers).
EARLIEST_RECORD_NS = 946_684_800 * 1_000_000_000  # 2000-01-01T00:00Z
MAX_RECORD_AHEAD_NS = 86_400 * 1_000_000_000
# Characters refused in entered text (issue 33): C0/C1 controls (terminal escape sequences
# reached `barkwatch case show` raw) and Unicode bidirectional controls (U+202E reordered
# what followed a name). Line breaks and tabs stay allowed in notes.
_REFUSED = {*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x200E, 0x200F,
            *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
_NOTE_ALLOWED = {0x09, 0x0A, 0x0D}


class CaseError(AnalyzerError):
    """A record cannot be written or found (the message names the field and the value)."""


def check_characters(value: str, name: str, allowed: set[int] | frozenset[int] = frozenset()
                     ) -> str:
    """``value`` unless it holds a control or bidirectional-control character (CaseError
    names the field, the code point and where it is)."""
    for index, char in enumerate(value):
        point = ord(char)
        if point in _REFUSED and point not in allowed:
            raise CaseError(f"{name} holds the control character U+{point:04X} at position "
                            f"{index + 1}; remove it (control and bidirectional characters "
                            "are refused)")
    return value


def shown_safely(text: str) -> str:
    """``text`` for a terminal: every control or bidirectional character but a line break or
    a tab written as ``\\uXXXX`` (records older than the check at entry may hold them)."""
    return "".join(f"\\u{ord(c):04x}" if ord(c) in _REFUSED and ord(c) not in (0x09, 0x0A)
                   else c for c in text)


def _text(value: str, name: str, required: bool = True) -> str:
    cleaned = check_characters(value.strip(), name)
    if required and not cleaned:
        raise CaseError(f"{name} is empty")
    return cleaned


def _note(value: str, name: str, required: bool = False) -> str:
    """Free text of a record, at most MAX_NOTE_CHARS characters (the report lays each one
    out in a table cell; issue 33 measured a 1 MB note as hours of PDF rendering)."""
    cleaned = value.strip()
    if required and not cleaned:
        raise CaseError(f"{name} is empty")
    check_characters(cleaned, name, _NOTE_ALLOWED)
    if len(cleaned) > MAX_NOTE_CHARS:
        raise CaseError(f"{name} has {len(cleaned):,} characters; at most {MAX_NOTE_CHARS:,} "
                        "are kept (write the rest as a further record)")
    return cleaned


def _choice(value: str, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise CaseError(f"{name} {value!r} is not one of {', '.join(choices)}")
    return value


def create_private_file(path: Path) -> None:
    """Create ``path`` (and the SQLite side files' directory entry) at mode 0600: complainant
    identity is personal data (issue 21, deliverable 6)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)  # the umask may have taken bits away, never added: make it exact


class CaseFile:
    """An open case file. ``clock`` gives epoch ns (tests pass their own)."""

    def __init__(self, path: str | Path, clock: Callable[[], int] = time.time_ns) -> None:
        self.path = Path(path)
        self.clock = clock
        if not self.path.exists():
            if not self.path.parent.is_dir():
                raise CaseError(f"case file {self.path}: folder {self.path.parent} does not "
                                "exist")
            create_private_file(self.path)
            log.info("created case file %s (mode 0600)", self.path)
        # SQLite gives the -wal and -shm files the main file's permissions.
        self.connection = sqlite3.connect(self.path, isolation_level=None)
        try:
            self.connection.execute("PRAGMA journal_mode = WAL")
            self.connection.execute("PRAGMA foreign_keys = ON")
            migrate(self.connection)
        except sqlite3.DatabaseError as exc:
            self.connection.close()
            raise CaseError(f"case file {self.path} is not a usable SQLite database: "
                            f"{exc}") from exc

    def close(self) -> None:
        """Close the database."""
        self.connection.close()

    def __enter__(self) -> CaseStore:
        return CaseStore(self)

    def __exit__(self, *exc: object) -> None:
        self.close()


class CaseStore:
    """Reads and appends the case file's records."""

    def __init__(self, case_file: CaseFile) -> None:
        self.file = case_file
        self.db = case_file.connection

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _record_time(self, at_ns: int, name: str = "the record's time") -> int:
        """``at_ns`` if it lies from 2000 to a day after now; else CaseError saying so."""
        latest = self.file.clock() + MAX_RECORD_AHEAD_NS
        if not EARLIEST_RECORD_NS <= at_ns <= latest:
            raise CaseError(f"{name} ({at_ns / 1e9:.0f} s since 1970) is outside the plausible "
                            "window: from 2000-01-01 to one day after now")
        return at_ns

    def _insert(self, table: str, values: dict[str, Any], actor: str, action: str) -> int:
        """Insert one record and its audit entry in one transaction; returns the row id."""
        actor = _text(actor, "officer")
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        with self._transaction() as db:
            try:
                cursor = db.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})",
                                    tuple(values.values()))
            except sqlite3.IntegrityError as exc:
                raise CaseError(f"{table}: {exc}") from exc
            row_id = int(cursor.lastrowid or 0)
            self._audit(actor, action, table, row_id, values)
        return row_id

    def _audit(self, actor: str, action: str, entity: str, entity_id: int,
               detail: dict[str, Any]) -> None:
        """Append one audit entry (inside the caller's transaction)."""
        self.db.execute("INSERT INTO audit_log (at_ns, actor, action, entity, entity_id, "
                        "detail) VALUES (?, ?, ?, ?, ?, ?)",
                        (self.file.clock(), actor, action, entity, entity_id,
                         json.dumps(detail, sort_keys=True)))

    def record_access(self, actor: str, action: str, entity: str, entity_ids: list[int],
                      detail: dict[str, Any]) -> None:
        """Audit what writes no record: an officer viewing complainants' identities, a
        sign-in. One entry per entity id, all in one transaction."""
        actor = _text(actor, "officer")
        with self._transaction():
            for entity_id in entity_ids:
                self._audit(actor, action, entity, entity_id, detail)

    def _rows(self, cls: Callable[..., T], sql: str, *params: Any) -> list[T]:
        return [cls(*row) for row in self.db.execute(sql, params).fetchall()]

    # --- addresses and devices ----------------------------------------------------------------

    def add_address(self, premises: str, officer: str, owner_name: str = "",
                    owner_contact: str = "") -> int:
        """A premises (street address); ``owner_*`` the dog's owner or custodian if known."""
        premises = _text(premises, "premises")
        known = self.db.execute("SELECT id FROM addresses WHERE premises = ?",
                                (premises,)).fetchone()
        if known is not None:
            raise CaseError(f"address #{known[0]} is {premises!r} already")
        return self._insert("addresses", {
            "premises": premises,
            "owner_name": _text(owner_name, "owner name", required=False),
            "owner_contact": _text(owner_contact, "owner contact", required=False),
            "created_ns": self.file.clock()},
            officer, "add address")

    def address(self, address_id: int) -> Address:
        """The address ``address_id``."""
        rows = self._rows(Address, "SELECT id, premises, owner_name, owner_contact, created_ns "
                          "FROM addresses WHERE id = ?", address_id)
        if not rows:
            raise CaseError(f"no address {address_id}")
        return rows[0]

    def addresses(self) -> list[Address]:
        """Every address."""
        return self._rows(Address, "SELECT id, premises, owner_name, owner_contact, created_ns "
                          "FROM addresses ORDER BY id")

    def place_device(self, address_id: int, device_id: str, placed_ns: int, officer: str,
                     removed_ns: int | None = None, site_record: str = "") -> int:
        """Record that ``device_id`` measured at the address from ``placed_ns``."""
        self.address(address_id)
        if not DEVICE_ID_PATTERN.match(device_id):
            raise CaseError(f"device id {device_id!r} does not match "
                            f"{DEVICE_ID_PATTERN.pattern}")
        if removed_ns is not None and removed_ns <= placed_ns:
            raise CaseError("removal time is not after the placement time")
        return self._insert("placements", {
            "address_id": address_id, "device_id": device_id, "placed_ns": placed_ns,
            "removed_ns": removed_ns, "site_record": site_record}, officer, "place device")

    def remove_device(self, placement_id: int, removed_ns: int, officer: str) -> None:
        """Record that the device of placement ``placement_id`` stopped measuring at its
        address at ``removed_ns`` (once: a placement already ended is refused)."""
        row = self.db.execute("SELECT device_id, placed_ns, removed_ns FROM placements "
                              "WHERE id = ?", (placement_id,)).fetchone()
        if row is None:
            raise CaseError(f"no placement {placement_id}")
        device_id, placed_ns, already = row
        if already is not None:
            raise CaseError(f"placement {placement_id} ({device_id}) already ended at "
                            f"{format_time(already)}")
        if removed_ns <= placed_ns:
            raise CaseError(f"the removal time is not after the placement time "
                            f"({format_time(placed_ns)})")
        removed_ns = self._record_time(removed_ns, "the removal time")
        actor = _text(officer, "officer")
        with self._transaction():
            self.db.execute("UPDATE placements SET removed_ns = ? WHERE id = ? AND "
                            "removed_ns IS NULL", (removed_ns, placement_id))
            self._audit(actor, "remove device", "placements", placement_id,
                        {"device_id": device_id, "removed_ns": removed_ns})

    def set_site_record(self, placement_id: int, site_record: str, officer: str,
                        action: str = "set premises sector") -> None:
        """Replace the installation record of placement ``placement_id`` (the field check's
        premises sector, issue 36), audited with the record before and after."""
        row = self.db.execute("SELECT site_record FROM placements WHERE id = ?",
                              (placement_id,)).fetchone()
        if row is None:
            raise CaseError(f"no placement {placement_id}")
        actor = _text(officer, "officer")
        with self._transaction():
            self.db.execute("UPDATE placements SET site_record = ? WHERE id = ?",
                            (site_record, placement_id))
            self._audit(actor, action, "placements", placement_id,
                        {"site_record_before": row[0], "site_record": site_record})

    def placements(self, address_id: int) -> list[Placement]:
        """Devices placed at the address, in order of placement."""
        return self._rows(Placement, "SELECT id, address_id, device_id, placed_ns, removed_ns, "
                          "site_record FROM placements WHERE address_id = ? ORDER BY placed_ns",
                          address_id)

    # --- complaints -----------------------------------------------------------------------------

    def open_complaint(self, address_id: int, complainant_name: str, complainant_contact: str,
                       received_ns: int, span_start_ns: int, span_end_ns: int,
                       contemporaneous: bool, officer: str, complainant_role: str = "resident",
                       notes: str = "") -> int:
        """A complaint received at ``received_ns`` about barking in [span_start, span_end]."""
        self.address(address_id)
        if span_end_ns <= span_start_ns:
            raise CaseError("the span complained about ends before it starts")
        return self._insert("complaints", {
            "address_id": address_id,
            "complainant_name": _text(complainant_name, "complainant name"),
            "complainant_contact": _text(complainant_contact, "complainant contact"),
            "complainant_role": _choice(complainant_role, "complainant role", ROLES),
            "received_ns": received_ns, "span_start_ns": span_start_ns,
            "span_end_ns": span_end_ns, "contemporaneous": int(contemporaneous),
            "officer": _text(officer, "officer"), "notes": _note(notes, "notes")},
            officer, "open complaint")

    _COMPLAINT = ("SELECT id, address_id, complainant_name, complainant_contact, "
                  "complainant_role, received_ns, span_start_ns, span_end_ns, contemporaneous, "
                  "officer, notes FROM complaints")

    @staticmethod
    def _complaint(*row: Any) -> Complaint:
        values = list(row)
        values[8] = bool(values[8])
        return Complaint(*values)

    def complaint(self, complaint_id: int) -> Complaint:
        """The complaint ``complaint_id``."""
        rows = self._rows(self._complaint, self._COMPLAINT + " WHERE id = ?", complaint_id)
        if not rows:
            raise CaseError(f"no complaint {complaint_id}")
        return rows[0]

    def complaints(self, address_id: int | None = None) -> list[Complaint]:
        """Complaints (at one address), oldest first."""
        if address_id is None:
            return self._rows(self._complaint, self._COMPLAINT + " ORDER BY received_ns, id")
        return self._rows(self._complaint, self._COMPLAINT + " WHERE address_id = ? "
                          "ORDER BY received_ns, id", address_id)

    # --- what the officer records ---------------------------------------------------------------

    def add_contact_attempt(self, complaint_id: int, at_ns: int, method: str, outcome: str,
                            officer: str, notes: str = "") -> int:
        """An attempt to reach the owner (seizure cond. 4)."""
        self.complaint(complaint_id)
        return self._insert("contact_attempts", {
            "complaint_id": complaint_id, "at_ns": self._record_time(at_ns),
            "method": _text(method, "method"),
            "outcome": _choice(outcome, "outcome", CONTACT_OUTCOMES),
            "officer": _text(officer, "officer"), "notes": _note(notes, "notes")},
            officer, "record contact attempt")

    def contact_attempts(self, complaint_id: int) -> list[ContactAttempt]:
        """Contact attempts of a complaint, in time order."""
        return self._rows(ContactAttempt, "SELECT id, complaint_id, at_ns, method, outcome, "
                          "officer, notes FROM contact_attempts WHERE complaint_id = ? "
                          "ORDER BY at_ns, id", complaint_id)

    def add_observation(self, complaint_id: int, at_ns: int, officer: str, notes: str) -> int:
        """What the officer saw or heard."""
        self.complaint(complaint_id)
        return self._insert("observations", {
            "complaint_id": complaint_id, "at_ns": self._record_time(at_ns),
            "officer": _text(officer, "officer"),
            "notes": _note(notes, "observation", required=True)}, officer, "record observation")

    def observations(self, complaint_id: int) -> list[Observation]:
        """Observations of a complaint, in time order."""
        return self._rows(Observation, "SELECT id, complaint_id, at_ns, officer, notes FROM "
                          "observations WHERE complaint_id = ? ORDER BY at_ns, id", complaint_id)

    def add_exception(self, complaint_id: int, kind: str, at_ns: int, officer: str,
                      notes: str = "") -> int:
        """Harassment, injury or trespass (subd. 5: then it is not a violation)."""
        self.complaint(complaint_id)
        return self._insert("exceptions", {
            "complaint_id": complaint_id, "kind": _choice(kind, "exception", EXCEPTION_KINDS),
            "at_ns": self._record_time(at_ns), "officer": _text(officer, "officer"),
            "notes": _note(notes, "notes")},
            officer, "record exception")

    def exceptions(self, complaint_id: int) -> list[OfficerException]:
        """Exceptions recorded on a complaint."""
        return self._rows(OfficerException, "SELECT id, complaint_id, kind, at_ns, officer, "
                          "notes FROM exceptions WHERE complaint_id = ? ORDER BY at_ns, id",
                          complaint_id)

    def add_attestation(self, complaint_id: int, condition: int, at_ns: int, officer: str,
                        notes: str = "") -> int:
        """The officer attests seizure condition 4, 5, 6 or 7."""
        self.complaint(complaint_id)
        if condition not in CONDITIONS_TO_ATTEST:
            raise CaseError(f"condition {condition} is not one the officer attests "
                            f"(4-7); 1 and 3 come from the records, 2 from a finding")
        return self._insert("attestations", {
            "complaint_id": complaint_id, "condition": condition,
            "at_ns": self._record_time(at_ns),
            "officer": _text(officer, "officer"), "notes": _note(notes, "notes")},
            officer, f"attest condition {condition}")

    def attestations(self, complaint_id: int) -> list[OfficerAttestation]:
        """Attestations on a complaint."""
        return self._rows(OfficerAttestation, "SELECT id, complaint_id, condition, at_ns, "
                          "officer, notes FROM attestations WHERE complaint_id = ? "
                          "ORDER BY condition, at_ns, id", complaint_id)

    def prior_citations(self, address_id: int, before_ns: int) -> int:
        """Citations at the address before ``before_ns`` (subd. 5 penalty: a first violation
        is a petty misdemeanor, so prior violations matter)."""
        row = self.db.execute(
            "SELECT count(*) FROM dispositions d JOIN complaints c ON d.complaint_id = c.id "
            "WHERE c.address_id = ? AND d.kind = 'citation' AND d.at_ns < ?",
            (address_id, before_ns)).fetchone()
        return int(row[0])

    def add_disposition(self, complaint_id: int, kind: str, at_ns: int, officer: str,
                        notes: str = "") -> int:
        """Warning, citation, seizure or no action, with the citations at the address before."""
        complaint = self.complaint(complaint_id)
        return self._insert("dispositions", {
            "complaint_id": complaint_id, "kind": _choice(kind, "disposition", DISPOSITIONS),
            "at_ns": self._record_time(at_ns), "officer": _text(officer, "officer"),
            "notes": _note(notes, "notes"),
            "prior_citations": self.prior_citations(complaint.address_id, at_ns)},
            officer, "record disposition")

    def dispositions(self, complaint_id: int) -> list[Disposition]:
        """Dispositions of a complaint."""
        return self._rows(Disposition, "SELECT id, complaint_id, kind, at_ns, officer, notes, "
                          "prior_citations FROM dispositions WHERE complaint_id = ? "
                          "ORDER BY at_ns, id", complaint_id)

    # --- evidence links -------------------------------------------------------------------------

    def add_link(self, complaint_id: int, device_id: str, rule: str, start_ns: int,
                 end_ns: int, digest: str, officer: str) -> int:
        """Link an evidence window (by device, rule, span and digest) to the complaint."""
        self.complaint(complaint_id)
        return self._insert("evidence_links", {
            "complaint_id": complaint_id, "device_id": device_id,
            "rule": _choice(rule, "rule", RULES), "start_ns": start_ns, "end_ns": end_ns,
            "digest": digest, "linked_ns": self.file.clock(),
            "officer": _text(officer, "officer")}, officer, "link evidence window")

    def links(self, complaint_id: int) -> list[EvidenceLink]:
        """Evidence windows linked to a complaint, in span order."""
        return self._rows(EvidenceLink, "SELECT id, complaint_id, device_id, rule, start_ns, "
                          "end_ns, digest, linked_ns, officer FROM evidence_links WHERE "
                          "complaint_id = ? ORDER BY start_ns, rule", complaint_id)

    # --- the audit log --------------------------------------------------------------------------

    def audit(self, complaint_id: int | None = None) -> list[AuditEntry]:
        """The audit log (entries about one complaint and its records), oldest first."""
        select = "SELECT id, at_ns, actor, action, entity, entity_id, detail FROM audit_log"
        if complaint_id is None:
            return self._rows(AuditEntry, select + " ORDER BY id")
        return self._rows(
            AuditEntry, select + " WHERE (entity = 'complaints' AND entity_id = ?) OR "
            "json_extract(detail, '$.complaint_id') = ? ORDER BY id", complaint_id, complaint_id)
