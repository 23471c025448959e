"""``barkwatch report CASE --out DIR``: the evidence report (HTML and PDF) of a complaint.

Registered in :mod:`analyzer.cli.main` with :func:`add_report_parser` and :func:`run_report`;
``barkwatch case export`` is the same with the case file's other commands.
"""

from __future__ import annotations

import argparse
from typing import Any

from analyzer.cases import CaseFile
from analyzer.cli.case import REPORT_DESCRIPTION, add_report_options, run_export


def add_report_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``report`` to the ``barkwatch`` sub-command parsers."""
    report: argparse.ArgumentParser = subparsers.add_parser(
        "report", help="write a complaint's evidence report (HTML and PDF)",
        description=REPORT_DESCRIPTION)
    add_report_options(report)
    return report


def run_report(args: argparse.Namespace) -> int:
    """Carry out ``barkwatch report``."""
    with CaseFile(args.db) as store:
        return run_export(args, store)
