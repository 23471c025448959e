"""The case file's schema: numbered migrations applied in order, tracked by PRAGMA user_version.

Each migration is the change from the version before; a file at any earlier version is
brought up to :data:`SCHEMA_VERSION` by the migrations it lacks, in one transaction each.
Never edit a released migration: add the next one.
"""

from __future__ import annotations

import sqlite3

from analyzer.errors import AnalyzerError


class CaseSchemaError(AnalyzerError):
    """The case file's schema is newer than this software or cannot be migrated."""


MIGRATIONS: tuple[str, ...] = (
    # 1: addresses, devices placed there, complaints and the append-only audit log.
    """
    CREATE TABLE addresses (
        id INTEGER PRIMARY KEY,
        premises TEXT NOT NULL UNIQUE CHECK (length(trim(premises)) > 0),
        owner_name TEXT NOT NULL DEFAULT '',
        owner_contact TEXT NOT NULL DEFAULT '',
        created_ns INTEGER NOT NULL
    );
    CREATE TABLE placements (
        id INTEGER PRIMARY KEY,
        address_id INTEGER NOT NULL REFERENCES addresses(id),
        device_id TEXT NOT NULL,
        placed_ns INTEGER NOT NULL,
        removed_ns INTEGER CHECK (removed_ns IS NULL OR removed_ns > placed_ns),
        site_record TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE complaints (
        id INTEGER PRIMARY KEY,
        address_id INTEGER NOT NULL REFERENCES addresses(id),
        complainant_name TEXT NOT NULL,
        complainant_contact TEXT NOT NULL,
        complainant_role TEXT NOT NULL
            CHECK (complainant_role IN ('resident', 'police', 'animal_control')),
        received_ns INTEGER NOT NULL,
        span_start_ns INTEGER NOT NULL,
        span_end_ns INTEGER NOT NULL CHECK (span_end_ns > span_start_ns),
        contemporaneous INTEGER NOT NULL CHECK (contemporaneous IN (0, 1)),
        officer TEXT NOT NULL CHECK (length(trim(officer)) > 0),
        notes TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE audit_log (
        id INTEGER PRIMARY KEY,
        at_ns INTEGER NOT NULL,
        actor TEXT NOT NULL CHECK (length(trim(actor)) > 0),
        action TEXT NOT NULL,
        entity TEXT NOT NULL,
        entity_id INTEGER NOT NULL,
        detail TEXT NOT NULL
    );
    CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
        BEGIN SELECT RAISE(ABORT, 'audit_log is append-only: entries are never rewritten'); END;
    CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
        BEGIN SELECT RAISE(ABORT, 'audit_log is append-only: entries are never deleted'); END;
    """,
    # 2: what the officer records: contact attempts, observations, exceptions, attestations of
    # seizure conditions 4-7 and dispositions.
    """
    CREATE TABLE contact_attempts (
        id INTEGER PRIMARY KEY,
        complaint_id INTEGER NOT NULL REFERENCES complaints(id),
        at_ns INTEGER NOT NULL,
        method TEXT NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('no_answer', 'ignored', 'refused', 'reached')),
        officer TEXT NOT NULL,
        notes TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE observations (
        id INTEGER PRIMARY KEY,
        complaint_id INTEGER NOT NULL REFERENCES complaints(id),
        at_ns INTEGER NOT NULL,
        officer TEXT NOT NULL,
        notes TEXT NOT NULL CHECK (length(trim(notes)) > 0)
    );
    CREATE TABLE exceptions (
        id INTEGER PRIMARY KEY,
        complaint_id INTEGER NOT NULL REFERENCES complaints(id),
        kind TEXT NOT NULL CHECK (kind IN ('harassment', 'injury', 'trespass')),
        at_ns INTEGER NOT NULL,
        officer TEXT NOT NULL,
        notes TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE attestations (
        id INTEGER PRIMARY KEY,
        complaint_id INTEGER NOT NULL REFERENCES complaints(id),
        condition INTEGER NOT NULL CHECK (condition BETWEEN 4 AND 7),
        at_ns INTEGER NOT NULL,
        officer TEXT NOT NULL,
        notes TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE dispositions (
        id INTEGER PRIMARY KEY,
        complaint_id INTEGER NOT NULL REFERENCES complaints(id),
        kind TEXT NOT NULL CHECK (kind IN ('warning', 'citation', 'seizure', 'no_action')),
        at_ns INTEGER NOT NULL,
        officer TEXT NOT NULL,
        notes TEXT NOT NULL DEFAULT '',
        prior_citations INTEGER NOT NULL CHECK (prior_citations >= 0)
    );
    """,
    # 3: links to evidence windows in InfluxDB (device, rule, span, digest; never a copy), and
    # the index the prior-complaint search uses.
    """
    CREATE TABLE evidence_links (
        id INTEGER PRIMARY KEY,
        complaint_id INTEGER NOT NULL REFERENCES complaints(id),
        device_id TEXT NOT NULL,
        rule TEXT NOT NULL CHECK (rule IN ('continuous', 'intermittent')),
        start_ns INTEGER NOT NULL,
        end_ns INTEGER NOT NULL CHECK (end_ns > start_ns),
        digest TEXT NOT NULL CHECK (length(digest) = 64),
        linked_ns INTEGER NOT NULL,
        officer TEXT NOT NULL,
        UNIQUE (complaint_id, digest)
    );
    CREATE INDEX complaints_by_address ON complaints (address_id, received_ns);
    """,
    # 4: officers who sign in to the review application (barkwatch review add-user): the
    # password as an argon2 hash only; ``officer`` is the name their records and audit entries
    # carry. Accounts are disabled, never deleted, so the audit log's names stay traceable.
    """
    CREATE TABLE officer_accounts (
        id INTEGER PRIMARY KEY,
        username TEXT NOT NULL UNIQUE
            CHECK (length(username) BETWEEN 1 AND 64 AND username NOT GLOB '*[^a-z0-9._-]*'),
        officer TEXT NOT NULL CHECK (length(trim(officer)) > 0),
        password_hash TEXT NOT NULL CHECK (password_hash GLOB '$argon2*'),
        created_ns INTEGER NOT NULL,
        disabled_ns INTEGER
    );
    """,
    # 5: roles (issue 33): an officer records; an administrator manages accounts and does not
    # record evidence. Accounts made before roles were officers in all but name: officers.
    """
    ALTER TABLE officer_accounts ADD COLUMN role TEXT NOT NULL DEFAULT 'officer'
        CHECK (role IN ('officer', 'administrator'));
    """,
    # 6: the officer's verdict on each event of a linked finding (issue 35): confirmed, or
    # rejected with a reason. An event is named by its onset and label (the dog_event point's
    # time and tag on the link's device). A verdict is never changed: a later one on the same
    # event supersedes it and names it in ``supersedes`` (at most once, so the history is one
    # line), and both stay.
    """
    CREATE TABLE event_verdicts (
        id INTEGER PRIMARY KEY,
        link_id INTEGER NOT NULL REFERENCES evidence_links(id),
        complaint_id INTEGER NOT NULL REFERENCES complaints(id),
        onset_ns INTEGER NOT NULL,
        offset_ns INTEGER NOT NULL CHECK (offset_ns >= onset_ns),
        label TEXT NOT NULL CHECK (length(trim(label)) > 0),
        verdict TEXT NOT NULL CHECK (verdict IN ('confirmed', 'rejected')),
        reason TEXT NOT NULL DEFAULT '',
        officer TEXT NOT NULL CHECK (length(trim(officer)) > 0),
        at_ns INTEGER NOT NULL,
        supersedes INTEGER REFERENCES event_verdicts(id),
        CHECK (verdict = 'confirmed' OR length(trim(reason)) > 0)
    );
    CREATE INDEX event_verdicts_by_event ON event_verdicts (link_id, onset_ns, label, id);
    CREATE UNIQUE INDEX event_verdicts_superseded_once ON event_verdicts (supersedes)
        WHERE supersedes IS NOT NULL;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


def schema_version(connection: sqlite3.Connection) -> int:
    """The file's schema version (0: empty)."""
    return int(connection.execute("PRAGMA user_version").fetchone()[0])


def migrate(connection: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Apply the migrations the file lacks up to ``target``; returns the version reached."""
    current = schema_version(connection)
    if current > SCHEMA_VERSION:
        raise CaseSchemaError(f"case file has schema version {current}; this software knows "
                              f"up to {SCHEMA_VERSION}: upgrade Barkwatch")
    if not 0 <= target <= SCHEMA_VERSION:
        raise CaseSchemaError(f"no schema version {target} (1..{SCHEMA_VERSION})")
    for version in range(current + 1, target + 1):
        # executescript commits first; BEGIN ... COMMIT keeps each migration all-or-nothing.
        try:
            connection.executescript(f"BEGIN; {MIGRATIONS[version - 1]} "
                                     f"PRAGMA user_version = {version}; COMMIT;")
        except sqlite3.Error as exc:
            connection.rollback()
            raise CaseSchemaError(f"migration to schema version {version} failed: "
                                  f"{exc}") from exc
    return max(current, target)
