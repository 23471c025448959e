"""``barkwatch case``: the case file (complaints and what the officer records about them).

Registered in :mod:`analyzer.cli.main` with :func:`add_case_parser` and :func:`run_case`.
Times are typed and printed in America/Chicago with UTC beside them; a time without a zone is
Chicago local time. Every change is appended to the case file's audit log.
Exit status: 0 done; 1 a record cannot be written or found, or InfluxDB refused; 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from analyzer.cases import (
    CONTACT_OUTCOMES,
    DISPOSITIONS,
    EXCEPTION_KINDS,
    ROLES,
    CaseError,
    CaseFile,
    CaseStore,
    CaseView,
    format_time,
    link_covering_windows,
    parse_local_time,
    read_case,
)
from analyzer.cases.backup import backup_case_file, restore_case_file
from analyzer.cases.localtime import TimeInputError
from analyzer.cases.store import shown_safely
from analyzer.cli.options import add_influx_options, influx_client
from analyzer.cli.verdicts import add_verdict_parsers, run_events, run_verdict

DB_ENV = "BARKWATCH_CASES_DB"
DEFAULT_DB = "barkwatch-cases.sqlite"

DESCRIPTION = """\
The case file: addresses (premises, owner or custodian) and the devices placed there,
complaints (complainant, when received, the span complained about, the officer who took it),
contact attempts with the owner, observations, exceptions (harassment, injury, trespass),
attestations of seizure conditions 4-7 and dispositions. 'link' finds the evidence windows in
InfluxDB that cover a complaint's span for the address's devices; 'show' verifies every link
(recomputes the window from stored events) and prints the seizure checklist of subd. 5.
Times: ISO 8601, Chicago local time unless a zone is given ('2026-06-01 21:05',
'2026-06-02T02:05Z'). The file holds personal data: it is created readable by its owner only."""


def local_time(text: str) -> int:
    """argparse type: a time as epoch ns (Chicago local unless a zone is given)."""
    try:
        return parse_local_time(text)
    except TimeInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_db_option(parser: argparse.ArgumentParser) -> None:
    """--db: the case file."""
    parser.add_argument("--db", default=os.environ.get(DB_ENV, DEFAULT_DB),
                        help=f"case file (SQLite; default ${DB_ENV} or {DEFAULT_DB})")


def _action(actions: Any, name: str, text: str, complaint: bool = True,
            officer: bool = True) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = actions.add_parser(name, help=text, description=text)
    add_db_option(parser)
    if complaint:
        parser.add_argument("complaint", type=int, metavar="CASE", help="complaint number")
    if officer:
        parser.add_argument("--officer", required=True,
                            help="who makes this change (written to the audit log)")
    return parser


def add_case_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``case`` and its actions to the ``barkwatch`` sub-command parsers."""
    case = subparsers.add_parser("case", help="complaints, the officer's records, evidence "
                                 "links and the seizure checklist", description=DESCRIPTION)
    actions = case.add_subparsers(dest="case_action")

    address = _action(actions, "address", "add an address (premises) to the case file",
                      complaint=False)
    address.add_argument("premises", help="street address of the premises")
    address.add_argument("--owner", default="", help="owner or custodian of the dog")
    address.add_argument("--owner-contact", default="", help="how to reach the owner")

    _action(actions, "addresses", "list addresses and the devices placed there",
            complaint=False, officer=False)

    place = _action(actions, "place", "record a device placed at an address", complaint=False)
    place.add_argument("address", type=int, metavar="ADDRESS", help="address number")
    place.add_argument("--device", required=True, help="device id")
    place.add_argument("--from", dest="placed", required=True, type=local_time, metavar="T",
                       help="when it started measuring there")
    place.add_argument("--to", dest="removed", type=local_time, metavar="T",
                       help="when it was removed (default: still there)")
    place.add_argument("--site", metavar="FILE", help="its installation record (kept as text)")

    remove = _action(actions, "remove", "record that a placed device was removed (it no "
                     "longer measures at the address)", complaint=False)
    remove.add_argument("placement", type=int, metavar="PLACEMENT",
                        help="placement number (barkwatch case addresses lists them)")
    remove.add_argument("--at", type=local_time, metavar="T", help="when (default now)")

    opened = _action(actions, "open", "open a complaint (or record an earlier one: its "
                     "received time in the past)", complaint=False)
    opened.add_argument("--address", type=int, required=True, help="address number")
    opened.add_argument("--complainant", required=True, help="complainant's name")
    opened.add_argument("--contact", required=True, help="complainant's phone or e-mail")
    opened.add_argument("--role", choices=ROLES, default="resident",
                        help="who the complainant is (default resident)")
    opened.add_argument("--received", required=True, type=local_time, metavar="T",
                        help="when the complaint was received")
    opened.add_argument("--from", dest="span_start", required=True, type=local_time,
                        metavar="T", help="start of the barking complained about")
    opened.add_argument("--to", dest="span_end", required=True, type=local_time, metavar="T",
                        help="end of the barking complained about")
    when = opened.add_mutually_exclusive_group(required=True)
    when.add_argument("--contemporaneous", dest="contemporaneous", action="store_true",
                      help="the complainant called while the barking went on")
    when.add_argument("--not-contemporaneous", dest="contemporaneous", action="store_false",
                      help="the complaint came afterwards")
    opened.add_argument("--note", default="", help="notes")

    listed = _action(actions, "list", "list complaints", complaint=False, officer=False)
    listed.add_argument("--address", type=int, help="only this address")

    show = _action(actions, "show", "show a complaint, verify its links, print the seizure "
                   "checklist", officer=False)
    add_influx_options(show)

    contact = _action(actions, "contact", "record an attempt to contact the owner")
    contact.add_argument("--at", type=local_time, metavar="T", help="when (default now)")
    contact.add_argument("--method", required=True, help="phone, door, letter, ...")
    contact.add_argument("--outcome", required=True, choices=CONTACT_OUTCOMES)
    contact.add_argument("--note", default="", help="notes")

    observe = _action(actions, "observe", "record an officer's observation")
    observe.add_argument("--at", type=local_time, metavar="T", help="when (default now)")
    observe.add_argument("--note", required=True, help="what was seen or heard")

    exception = _action(actions, "exception", "record harassment, injury or trespass "
                        "(subd. 5: then the barking is not a violation)")
    exception.add_argument("--kind", required=True, choices=EXCEPTION_KINDS)
    exception.add_argument("--at", type=local_time, metavar="T", help="when (default now)")
    exception.add_argument("--note", default="", help="what the officer found")

    attest = _action(actions, "attest", "attest a seizure condition the records cannot show")
    attest.add_argument(
        "--condition", type=int, required=True, choices=(4, 5, 6, 7),
        help="the seizure condition of section 701, subd. 5 that the officer attests: 4 "
        "reasonable attempts to contact the owner failed, 5 no forced entry, 6 no less "
        "intrusive means, 7 written notice given")
    attest.add_argument("--at", type=local_time, metavar="T", help="when (default now)")
    attest.add_argument("--note", default="", help="what supports it")

    dispose = _action(actions, "dispose", "record a disposition")
    dispose.add_argument("--kind", required=True, choices=DISPOSITIONS)
    dispose.add_argument("--at", type=local_time, metavar="T", help="when (default now)")
    dispose.add_argument("--note", default="", help="notes")

    link = _action(actions, "link", "link the evidence windows in InfluxDB that cover the "
                   "complaint's span, for the devices placed at its address")
    add_influx_options(link)

    audit = _action(actions, "audit", "print the audit log (of one complaint)",
                    complaint=False, officer=False)
    audit.add_argument("complaint", type=int, nargs="?", metavar="CASE",
                       help="only entries about this complaint")

    backup = _action(actions, "backup", "copy the case file, while it is in use, into a new "
                     "file (mode 0600), checked; the copy holds personal data",
                     complaint=False)
    backup.add_argument("destination", metavar="FILE", help="the backup file to create "
                        "(never overwritten)")
    restore = _action(actions, "restore", "put a backup in place of the case file (--db); "
                      "the file it replaces is renamed aside and kept. Stop the review "
                      "application first", complaint=False)
    restore.add_argument("backup", metavar="FILE", help="a file made by 'barkwatch case backup'")

    export: argparse.ArgumentParser = actions.add_parser(
        "export", help="write the evidence report to hand on; --redact withholds the "
        "complainant", description=REPORT_DESCRIPTION)
    add_report_options(export)
    add_verdict_parsers(actions, _action)
    return case


REPORT_DESCRIPTION = """\
Write the evidence report of complaint CASE into DIR: complaint-CASE.html (one self-contained
file, plots inline) and complaint-CASE.pdf with the same content. It quotes the ordinance,
sets each element of the violation against the linked evidence windows (re-read from InfluxDB
and recomputed now: a window that no longer verifies is said so), plots levels, the rule's
progress, events per minute and gaps, and lists the exceptions, the seizure checklist and the
complaint history at the address. It names the complainant (personal data; the files are
created mode 0600) unless --redact. Exit status 0 when written, whether or not every window
verifies."""


def add_report_options(parser: argparse.ArgumentParser) -> None:
    """CASE, --out, --redact, --db and the InfluxDB options of ``report`` and ``export``."""
    parser.add_argument("complaint", type=int, metavar="CASE", help="complaint number")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for the files")
    parser.add_argument("--redact", action="store_true",
                        help="withhold the complainant's identity (for anyone outside the case)")
    # analyzer.reports.paper.PAPER_SIZES, written out: importing it loads matplotlib.
    parser.add_argument("--paper", choices=("letter", "a4"), default="letter",
                        help="paper size of the PDF (default letter: US Letter; the review "
                             "application's is [report] paper)")
    add_db_option(parser)
    add_influx_options(parser)


def run_export(args: argparse.Namespace, store: CaseStore) -> int:
    """Gather, render and write the report; prints where the files are."""
    from analyzer.reports import gather, write_report  # matplotlib: only when reporting

    data = gather(store, args.complaint, influx_client(args), redacted=args.redact)
    html_path, pdf_path = write_report(data, args.out, args.paper)
    failing = [w for w in data.windows if not w.check.verified]
    print(f"HTML: {html_path}")
    print(f"PDF:  {pdf_path}")
    if failing:
        print(f"note: {len(failing)} of {len(data.windows)} evidence window(s) do not verify; "
              "the report says which and why")
    return 0


def _say(text: str) -> None:
    """Print a line of records: control and bidirectional characters escaped (issue 33)."""
    print(shown_safely(text))



def print_view(view: CaseView) -> None:
    """The complaint, its records, its links as verified now, and the checklist."""
    c, a = view.complaint, view.address
    _say(f"Complaint #{c.id} at {a.premises} (address #{a.id}; owner "
          f"{a.owner_name or 'unknown'})")
    _say(f"  complainant  {c.complainant_name}, {c.complainant_contact} ({c.complainant_role})"
          "  [personal data]")
    _say(f"  received     {format_time(c.received_ns)} by {c.officer}"
          f"{'' if c.contemporaneous else ', not contemporaneous'}")
    _say(f"  barking      {format_time(c.span_start_ns)} to {format_time(c.span_end_ns)}")
    for p in view.placements:
        until = format_time(p.removed_ns) if p.removed_ns is not None else "now"
        _say(f"  device       {p.device_id} from {format_time(p.placed_ns)} to {until}")
    for t in view.contacts:
        _say(f"  contact      {format_time(t.at_ns)} {t.method}: {t.outcome} ({t.officer})"
              f" {t.notes}".rstrip())
    for o in view.observations:
        _say(f"  observation  {format_time(o.at_ns)} {o.officer}: {o.notes}")
    for e in view.exceptions:
        _say(f"  EXCEPTION    {e.kind} {format_time(e.at_ns)} {e.officer}: {e.notes}")
    for d in view.dispositions:
        _say(f"  disposition  {d.kind} {format_time(d.at_ns)} {d.officer}; "
              f"{d.prior_citations} earlier citation(s) at the address {d.notes}".rstrip())
    for check in view.checks:
        k = check.link
        _say(f"  evidence     {k.rule} {k.device_id} {format_time(k.start_ns)} to "
              f"{format_time(k.end_ns)} digest {k.digest}: {check.state.upper()}")
        for detail in check.details:
            _say(f"               {detail}")
    if not view.checks:
        _say("  evidence     none linked (barkwatch case link)")
    _say("Seizure checklist (subd. 5):")
    for item in view.checklist:
        _say(f"  [{'x' if item.met else ' '}] {item.number}. {item.basis}: {item.text}")
        for line in item.evidence:
            _say(f"        + {line}")
        for line in item.missing:
            _say(f"        - missing: {line}")


def _run(args: argparse.Namespace, store: CaseStore) -> int:
    action = args.case_action
    now = store.file.clock()
    at = getattr(args, "at", None) or now
    if action == "address":
        number = store.add_address(args.premises, args.officer, args.owner, args.owner_contact)
        print(f"address #{number}: {args.premises}")
    elif action == "addresses":
        for a in store.addresses():
            devices = ", ".join(
                f"{p.device_id} (placement #{p.id}"
                f"{', removed' if p.removed_ns is not None else ''})"
                for p in store.placements(a.id)) or "no device"
            print(f"#{a.id}  {a.premises}  owner {a.owner_name or 'unknown'}  {devices}")
    elif action == "place":
        record = ""
        if args.site:
            try:
                with open(args.site, encoding="utf-8") as f:
                    record = f.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise CaseError(f"installation record {args.site}: {exc}") from exc
        number = store.place_device(args.address, args.device, args.placed, args.officer,
                                    args.removed, record)
        print(f"placement #{number}: {args.device} at address #{args.address}")
    elif action == "remove":
        store.remove_device(args.placement, at, args.officer)
        print(f"placement #{args.placement}: removed at {format_time(at)}")
    elif action == "open":
        number = store.open_complaint(args.address, args.complainant, args.contact,
                                      args.received, args.span_start, args.span_end,
                                      args.contemporaneous, args.officer, args.role, args.note)
        print(f"complaint #{number} opened")
    elif action == "list":
        for c in store.complaints(args.address):
            links = len(store.links(c.id))
            print(f"#{c.id}  {store.address(c.address_id).premises}  received "
                  f"{format_time(c.received_ns)}  {links} evidence link(s)")
    elif action == "show":
        print_view(read_case(store, args.complaint, influx_client(args)))
    elif action == "contact":
        store.add_contact_attempt(args.complaint, at, args.method, args.outcome, args.officer,
                                  args.note)
    elif action == "observe":
        store.add_observation(args.complaint, at, args.officer, args.note)
    elif action == "exception":
        store.add_exception(args.complaint, args.kind, at, args.officer, args.note)
    elif action == "attest":
        store.add_attestation(args.complaint, args.condition, at, args.officer, args.note)
    elif action == "dispose":
        store.add_disposition(args.complaint, args.kind, at, args.officer, args.note)
    elif action == "link":
        return _link(args, store)
    elif action == "audit":
        for e in store.audit(args.complaint):
            print(f"{format_time(e.at_ns)}  {e.actor}: {e.action} #{e.entity_id} ({e.entity}) "
                  f"{e.detail}")
    elif action == "export":
        return run_export(args, store)
    elif action in ("events", "verdict"):
        return (run_events if action == "events" else run_verdict)(args, store)
    return 0


def _link(args: argparse.Namespace, store: CaseStore) -> int:
    added, total = link_covering_windows(store, influx_client(args), args.complaint,
                                         args.officer)
    for link in added:
        print(f"linked {link.rule} {link.device_id} {format_time(link.start_ns)} to "
              f"{format_time(link.end_ns)} digest {link.digest}")
    print(f"complaint #{args.complaint}: {len(added)} window(s) linked, {total} in all")
    return 0


def run_case(args: argparse.Namespace) -> int:
    """Carry out ``barkwatch case ...``; returns the exit status (AnalyzerError propagates
    to main, which prints it and exits 1)."""
    if getattr(args, "case_action", None) is None:
        print("barkwatch case: choose an action (see barkwatch case --help)", file=sys.stderr)
        return 2
    if args.case_action == "restore":
        restored, kept = restore_case_file(args.backup, args.db, args.officer)
        print(f"restored {args.db} from {args.backup}: {restored.line()}")
        print(f"the file it replaced is kept as {kept}" if kept else "there was no case file "
              "to replace")
        return 0
    if args.case_action == "backup" and not Path(args.db).is_file():
        raise CaseError(f"case file {args.db} does not exist: nothing to back up")
    with CaseFile(args.db) as store:
        if args.case_action == "backup":
            summary = backup_case_file(args.db, args.destination)
            store.record_access(args.officer, "case file backed up", "audit_log", [0],
                                {"destination": str(Path(args.destination).resolve())})
            print(f"backed up {args.db} to {args.destination} (mode 0600): {summary.line()}")
            return 0
        return _run(args, store)
