"""Case records in SQLite: complaints, the officer's records, evidence links, the audit log."""

from __future__ import annotations

from analyzer.cases.accounts import (
    USERNAME_PATTERN,
    OfficerAccount,
    account_by_id,
    accounts,
    add_account,
    check_username,
    disable_account,
    find_account,
    unlock_account,
)
from analyzer.cases.checklist import ChecklistItem, seizure_checklist
from analyzer.cases.links import (
    UNCHECKED,
    VERIFIED,
    LinkCheck,
    candidate_windows,
    verify_link,
)
from analyzer.cases.localtime import CITY_ZONE, TimeInputError, format_time, parse_local_time
from analyzer.cases.records import (
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
from analyzer.cases.schema import SCHEMA_VERSION, CaseSchemaError, migrate
from analyzer.cases.store import CaseError, CaseFile, CaseStore, shown_safely
from analyzer.cases.view import CaseView, read_case

__all__ = [
    "CITY_ZONE",
    "CONTACT_OUTCOMES",
    "DISPOSITIONS",
    "EXCEPTION_KINDS",
    "ROLES",
    "SCHEMA_VERSION",
    "UNCHECKED",
    "USERNAME_PATTERN",
    "VERIFIED",
    "Address",
    "AuditEntry",
    "CaseError",
    "CaseFile",
    "CaseSchemaError",
    "CaseStore",
    "CaseView",
    "ChecklistItem",
    "Complaint",
    "ContactAttempt",
    "Disposition",
    "EvidenceLink",
    "LinkCheck",
    "Observation",
    "OfficerAccount",
    "OfficerAttestation",
    "OfficerException",
    "Placement",
    "TimeInputError",
    "account_by_id",
    "accounts",
    "add_account",
    "candidate_windows",
    "check_username",
    "disable_account",
    "find_account",
    "format_time",
    "migrate",
    "parse_local_time",
    "read_case",
    "seizure_checklist",
    "shown_safely",
    "unlock_account",
    "verify_link",
]
