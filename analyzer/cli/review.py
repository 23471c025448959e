"""``barkwatch review``: the officers' web application, and its accounts.

Registered in :mod:`analyzer.cli.main` with :func:`add_review_parser` and :func:`run_review`.
Exit status: 0 done; 1 configuration, case file or password refused; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

# analyzer.cases.ACCOUNT_ROLES, spelled here so --help loads nothing heavy (check_role checks).
ROLE_HELP = "officer or administrator"

DESCRIPTION = """\
Serve evidence review in the browser for officers (uvicorn; loopback by default): the cases,
one case with its findings verified now, the seizure checklist and the report (HTML, PDF), a
finding's plots with zoom, the devices at an address; contact attempts, observations,
exceptions and dispositions recorded from the page with their audit entries. Officers sign in
with accounts made by 'add-user' (role officer: records; administrator: manages accounts on the
app's Accounts page, records nothing); every sign-in and every view of a complainant's identity
is written to the case file's audit log. 'barkwatch review --describe' lists the configuration
keys (deploy/review.example.toml)."""


def _config_option(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument("--config", metavar="FILE", default=default,
                        help="review configuration (TOML; its cases_db names the case file)")


def add_review_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``review`` and its account actions to the ``barkwatch`` sub-command parsers."""
    review: argparse.ArgumentParser = subparsers.add_parser(
        "review", help="serve evidence review in the browser for officers; add-user",
        description=DESCRIPTION)
    _config_option(review, None)
    review.add_argument("--describe", action="store_true",
                        help="print every configuration key with its default and meaning")
    actions = review.add_subparsers(dest="review_action")
    add = actions.add_parser("add-user", help="create an officer's account",
                             description="Create an account in the case file. The password is "
                             "asked twice on the terminal (or read as one line from standard "
                             "input with --password-stdin) and stored only as an argon2id "
                             "hash. Creating it is written to the audit log.")
    add.add_argument("username", help="sign-in name: 1-64 of a-z, 0-9, '.', '_', '-'")
    add.add_argument("--officer", required=True,
                     help="the officer's name as records and the audit log carry it")
    add.add_argument("--password-stdin", action="store_true",
                     help="read the password from standard input (one line)")
    add.add_argument("--role", default="officer", metavar="ROLE",
                     help="officer (records evidence; the default) or administrator (manages "
                     "accounts in the app, views cases, records nothing)")
    role = actions.add_parser("set-role", help="make an account an officer or an administrator"
                              " (its open sessions end)")
    role.add_argument("username")
    role.add_argument("role", help=ROLE_HELP)
    disable = actions.add_parser("disable-user", help="disable an account (history stays)")
    disable.add_argument("username")
    unlock = actions.add_parser("unlock-user", help="clear an account's failed sign-ins "
                                "(a running server applies it at the next sign-in)")
    unlock.add_argument("username")
    listed = actions.add_parser("users", help="list the accounts")
    for parser in (add, role, disable, unlock, listed):
        _config_option(parser, argparse.SUPPRESS)  # before or after the action
        parser.add_argument("--by", default=os.environ.get("SUDO_USER")
                            or os.environ.get("USER") or "administrator",
                            help="who makes the change, for the audit log (default: $SUDO_USER"
                            " or $USER)")
    return review


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("Password: ")
    if getpass.getpass("Again: ") != first:
        from analyzer.review import PasswordError

        raise PasswordError("the two passwords differ")
    return first


def run_review(args: argparse.Namespace) -> int:
    """Carry out ``barkwatch review``; AnalyzerError and ConfigError go to main (exit 1)."""
    from analyzer.review import describe_review_settings, load_review_settings

    if args.describe:
        print(describe_review_settings())
        return 0
    if not args.config:
        print("barkwatch review: --config FILE is needed (see barkwatch review --help)",
              file=sys.stderr)
        return 2
    settings = load_review_settings(args.config)
    if args.review_action is None:
        from analyzer.review import serve

        serve(settings)
        return 0
    from analyzer.cases import (
        CaseFile,
        accounts,
        add_account,
        disable_account,
        set_role,
        unlock_account,
    )

    if args.review_action == "add-user":
        from analyzer.cases import check_role
        from analyzer.review import hash_password

        check_role(args.role)  # before the password is asked for

        password_hash = hash_password(_read_password(args.password_stdin))
        with CaseFile(settings.cases_db) as store:
            number = add_account(store, args.username, args.officer, password_hash, args.by,
                                 args.role)
        print(f"account #{number}: {args.username} ({args.officer}), {args.role}")
    elif args.review_action == "set-role":
        with CaseFile(settings.cases_db) as store:
            set_role(store, args.username, args.role, args.by)
        print(f"account {args.username} is now an {args.role} (its open sessions end)")
    elif args.review_action == "disable-user":
        with CaseFile(settings.cases_db) as store:
            disable_account(store, args.username, args.by)
        print(f"account {args.username} disabled")
    elif args.review_action == "unlock-user":
        with CaseFile(settings.cases_db) as store:
            unlock_account(store, args.username, args.by)
        print(f"account {args.username} unlocked (its failed sign-ins are cleared)")
    elif args.review_action == "users":
        with CaseFile(settings.cases_db) as store:
            for account in accounts(store):
                state = "active" if account.active else "disabled"
                print(f"{account.username}  {account.officer}  {account.role}  {state}")
    return 0
