"""``barkwatch findings recompute``: re-derive stored findings from stored events.

Registered in :mod:`analyzer.cli.main` with :func:`add_findings_parser` and :func:`run_findings`.
Exit status: 0 every stored window re-derived exactly and the chain is whole; 1 a mismatch
(each one printed); 2 bad arguments or InfluxDB unreachable/refusing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from datetime import datetime
from typing import Any

from analyzer import __version__
from analyzer.cli.options import add_influx_options, influx_client
from analyzer.errors import AnalyzerError
from analyzer.store import recompute

log = logging.getLogger(__name__)

DESCRIPTION = """\
Re-read a device's stored dog events (with their audibility fields) and coverage (scored
level points) from InfluxDB, re-run the ordinance rules with the parameters printed in the
stored evidence windows, and compare every re-derived window with the stored one, digests
included. Also checks each stored digest and the chain of digests. Exits 1 on any mismatch."""


def parse_time_ns(text: str) -> int:
    """Integer ns since the epoch, or ISO 8601 with a time zone (``2026-06-01T21:00:00Z``)."""
    stripped = text.strip()
    if stripped.lstrip("-").isdigit():
        return int(stripped)
    try:
        moment = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither ns since the epoch nor an ISO 8601 time") from exc
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone; add Z or +HH:MM")
    seconds = int(moment.timestamp())
    return seconds * 1_000_000_000 + moment.microsecond * 1000


def add_findings_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``findings`` (with ``recompute``) to the ``barkwatch`` sub-command parsers."""
    findings = subparsers.add_parser("findings", help="ordinance findings stored in InfluxDB")
    actions = findings.add_subparsers(dest="findings_action")
    run = actions.add_parser("recompute", help="re-derive stored findings and compare them",
                             description=DESCRIPTION)
    run.add_argument("--device", required=True, help="device id")
    run.add_argument("--from", dest="start", required=True, type=parse_time_ns, metavar="T1",
                     help="first span start to check: ISO 8601 with zone, or ns since epoch")
    run.add_argument("--to", dest="end", required=True, type=parse_time_ns, metavar="T2",
                     help="last span start to check (inclusive)")
    add_influx_options(run)
    run.add_argument("--format", choices=["text", "json"], default="text",
                     help="readable lines (default) or one JSON document")
    return findings


def run_findings(args: argparse.Namespace) -> int:
    """Run ``barkwatch findings ...``; returns the exit status."""
    if getattr(args, "findings_action", None) != "recompute":
        print("barkwatch findings: choose an action: recompute (see --help)", file=sys.stderr)
        return 2
    if args.end < args.start:
        print(f"barkwatch findings recompute: --to ({args.end}) is before --from "
              f"({args.start})", file=sys.stderr)
        return 2
    client = influx_client(args)
    try:
        report = recompute(client, args.device, args.start, args.end,
                           current_software_version=__version__)
    except AnalyzerError as exc:
        print(f"barkwatch findings recompute: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps({
            "device": report.device_id, "ok": report.ok, "stored": report.stored,
            "recomputed": report.recomputed, "verified": report.verified,
            "mismatches": [asdict(m) for m in report.mismatches], "notes": report.notes,
        }, sort_keys=True))
    else:
        print(f"{report.device_id}: {report.stored} stored window(s), {report.recomputed} "
              f"recomputed, {report.verified} identical, {len(report.mismatches)} mismatch(es)")
        for m in report.mismatches:
            print(f"MISMATCH {m.kind} {m.rule} start_ns={m.start_ns}: {m.detail}")
        for note in report.notes:
            print(f"note: {note}")
    return 0 if report.ok else 1
