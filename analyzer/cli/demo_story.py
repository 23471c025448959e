"""The demo's case story: what an officer does with the finding the replay produced.

Through the code the ``barkwatch case`` and ``barkwatch report`` commands use (every change
goes to the case file's audit log): the demo address and its owner, an earlier complaint on a
prior date (subd. 5 seizure condition 3), the device placed there, the complaint about the
replayed barking (received while it went on: condition 1), the evidence windows in InfluxDB
that cover it linked and verified, a failed attempt to reach the owner, then the evidence
report (HTML and PDF) and the seizure checklist as ``barkwatch case show`` prints it.
All names and numbers are made up for the demo.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analyzer.cases import CaseFile, LinkCheck, candidate_windows, format_time
from analyzer.cli.case import print_view
from analyzer.store import InfluxClient

NS = 1_000_000_000
DAY_NS = 86_400 * NS
OFFICER = "Ofc. Demo"
OWNER, OWNER_CONTACT = "R. Owner (demo)", "555-0199"
COMPLAINANT, COMPLAINANT_CONTACT = "Ann Neighbour (demo)", "555-0101"
PRIOR_COMPLAINT_DAYS = 3  # the earlier complaint: always a prior date in Chicago
PLACED_DAYS = 2  # the device went up after the earlier complaint
RECEIVED_AFTER_S = 480  # the complainant calls 8 minutes into the replayed scene


def _say(text: str) -> None:
    print(text, flush=True)


@dataclass(frozen=True)
class Story:
    """What the story left: the complaint, its links as verified for the report, the files."""

    complaint_id: int
    checks: list[LinkCheck]
    html: Path
    pdf: Path
    audit_entries: int


def tell_case_story(influx: InfluxClient, case_db: Path, out_dir: Path, device_id: str,
                    premises: str, site_record: str, start_ns: int, end_ns: int) -> Story:
    """Build the case for the barking replayed over [start_ns, end_ns) by ``device_id`` at
    ``premises``, link the findings InfluxDB holds for it and write the report into
    ``out_dir``; prints each step. AnalyzerError propagates (the caller says what failed)."""
    from analyzer.reports import gather, write_report  # matplotlib: only when reporting

    received_ns = min(start_ns + RECEIVED_AFTER_S * NS, end_ns - NS)
    earlier_ns = received_ns - PRIOR_COMPLAINT_DAYS * DAY_NS
    with CaseFile(case_db) as store:
        address = store.add_address(premises, OFFICER, OWNER, OWNER_CONTACT)
        prior = store.open_complaint(
            address, COMPLAINANT, COMPLAINANT_CONTACT, earlier_ns, earlier_ns - 1800 * NS,
            earlier_ns, True, OFFICER, notes="first complaint at this address")
        _say(f"      address #{address} {premises}; complaint #{prior} received "
             f"{format_time(earlier_ns)} (the earlier complaint on a prior date)")
        store.place_device(address, device_id, earlier_ns + (PRIOR_COMPLAINT_DAYS
                                                             - PLACED_DAYS) * DAY_NS,
                           OFFICER, site_record=site_record)
        complaint = store.open_complaint(
            address, COMPLAINANT, COMPLAINANT_CONTACT, received_ns, start_ns, end_ns, True,
            OFFICER, notes="called while the dog was barking")
        _say(f"      device {device_id} placed there; complaint #{complaint} received "
             f"{format_time(received_ns)}, while the barking went on")
        for stored in candidate_windows(influx, store.complaint(complaint),
                                        store.placements(address)):
            w = stored.window
            store.add_link(complaint, w.device_id, w.rule, w.start_ns,
                           int(stored.fields["end_ns"]), w.digest, OFFICER)
        store.add_contact_attempt(complaint, received_ns + 120 * NS, "phone", "no_answer",
                                  OFFICER, "the owner's number rang out")
        data = gather(store, complaint, influx)
        _say("      barkwatch case show would print now:")
        print_view(data.view)
        html, pdf = write_report(data, out_dir)
        audit = store.audit()
    _say(f"      audit log: {len(audit)} entries, one per change (barkwatch case audit)")
    return Story(complaint, [w.check for w in data.windows], html, pdf, len(audit))
