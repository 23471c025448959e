"""Officers' accounts for the review application, kept in the case file (schema migrations 4
and 5).

Only a password hash is stored (the caller hashes: analyzer.review uses argon2); creating or
disabling an account is one transaction with its audit entry, whose detail never holds the
hash. Accounts are disabled, never deleted, so every name in the audit log stays traceable.

Each account has one role (issue 33): an **officer** records (contact attempts, observations,
exceptions, dispositions); an **administrator** manages accounts (disables, unlocks) and views
cases, and records nothing, so every record is an officer's. One person who does both holds
two accounts.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from analyzer.cases.store import CaseError, CaseStore, _text

USERNAME_PATTERN = re.compile(r"[a-z0-9._-]{1,64}")
OFFICER, ADMINISTRATOR = "officer", "administrator"
ACCOUNT_ROLES = (OFFICER, ADMINISTRATOR)


@dataclass(frozen=True)
class OfficerAccount:
    """One officer who may sign in; ``officer`` is the name written on records and audit."""

    id: int
    username: str
    officer: str
    password_hash: str
    created_ns: int
    disabled_ns: int | None
    role: str = OFFICER

    @property
    def active(self) -> bool:
        """True unless the account was disabled."""
        return self.disabled_ns is None


_SELECT = ("SELECT id, username, officer, password_hash, created_ns, disabled_ns, role "
           "FROM officer_accounts")


def check_username(username: str) -> str:
    """``username`` if it is 1-64 of a-z, 0-9, '.', '_', '-'; else CaseError naming it."""
    if not USERNAME_PATTERN.fullmatch(username):
        raise CaseError(f"user name {username!r}: use 1-64 characters of a-z, 0-9, '.', '_', "
                        "'-'")
    return username


def check_role(role: str) -> str:
    """``role`` if it is one of ACCOUNT_ROLES; else CaseError naming it."""
    if role not in ACCOUNT_ROLES:
        raise CaseError(f"role {role!r}: use one of {', '.join(ACCOUNT_ROLES)}")
    return role


def add_account(store: CaseStore, username: str, officer: str, password_hash: str,
                actor: str, role: str = OFFICER) -> int:
    """Create an account; ``actor`` (who ran the command) goes to the audit log."""
    check_username(username)
    check_role(role)
    officer = _text(officer, "officer name")
    if not password_hash.startswith("$argon2"):
        raise CaseError("an account stores an argon2 password hash, never a password")
    with store._transaction() as db:
        try:
            cursor = db.execute("INSERT INTO officer_accounts (username, officer, password_hash,"
                                " created_ns, role) VALUES (?, ?, ?, ?, ?)",
                                (username, officer, password_hash, store.file.clock(), role))
        except sqlite3.IntegrityError as exc:
            raise CaseError(f"user name {username!r} is taken") from exc
        row_id = int(cursor.lastrowid or 0)
        store._audit(_text(actor, "actor"), "add officer account", "officer_accounts", row_id,
                     {"username": username, "officer": officer, "role": role})
    return row_id


def set_role(store: CaseStore, username: str, role: str, actor: str) -> None:
    """Give an account another role (its open sessions end at their next request)."""
    check_role(role)
    account = _existing(store, username)
    if account.role == role:
        raise CaseError(f"account {username!r} is already an {role}")  # both roles: "an"
    with store._transaction() as db:
        db.execute("UPDATE officer_accounts SET role = ? WHERE id = ?", (role, account.id))
        store._audit(_text(actor, "actor"), "change officer account role", "officer_accounts",
                     account.id, {"username": username, "from": account.role, "to": role})


def disable_account(store: CaseStore, username: str, actor: str) -> None:
    """Disable an account (it can no longer sign in; its history stays)."""
    account = _existing(store, username)
    with store._transaction() as db:
        db.execute("UPDATE officer_accounts SET disabled_ns = ? WHERE id = ?",
                   (store.file.clock(), account.id))
        store._audit(_text(actor, "actor"), "disable officer account", "officer_accounts",
                     account.id, {"username": username})


def unlock_account(store: CaseStore, username: str, actor: str) -> None:
    """Audit an unlock: a running review server reads the newest such entry at the next
    sign-in and clears the account's failed sign-ins recorded before it."""
    account = _existing(store, username)
    store.record_access(_text(actor, "actor"), "unlock officer account", "officer_accounts",
                        [account.id], {"username": username})


def _existing(store: CaseStore, username: str) -> OfficerAccount:
    """The account named ``username``, or CaseError saying there is none."""
    account = find_account(store, username)
    if account is None:
        raise CaseError(f"no account {username!r}")
    return account


def find_account(store: CaseStore, username: str) -> OfficerAccount | None:
    """The account named ``username`` (enabled or not), or None."""
    row = store.db.execute(_SELECT + " WHERE username = ?", (username,)).fetchone()
    return OfficerAccount(*row) if row else None


def account_by_id(store: CaseStore, account_id: int) -> OfficerAccount | None:
    """The account ``account_id`` (enabled or not), or None: the review application checks
    each request's session against it (issue 33: a disabled account kept its session)."""
    row = store.db.execute(_SELECT + " WHERE id = ?", (account_id,)).fetchone()
    return OfficerAccount(*row) if row else None


def accounts(store: CaseStore) -> list[OfficerAccount]:
    """Every account, in order of creation."""
    return [OfficerAccount(*row) for row in store.db.execute(_SELECT + " ORDER BY id")]
