"""Evidence links: find the windows that cover a complaint and verify a link on every read.

A link names a window in InfluxDB by device, rule, span start and digest; nothing of the
finding is copied. Verifying reads the stored window back (is it there, is its digest the
linked one, does its content hash to that digest) and recomputes it from the stored events and
coverage (analyzer.store.recompute), so an event changed after the fact is caught too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer.cases.records import Complaint, EvidenceLink, Placement
from analyzer.errors import AnalyzerError
from analyzer.store import InfluxClient, StoredWindow, load_windows, recompute

if TYPE_CHECKING:
    from analyzer.cases.store import CaseStore

NS = 1_000_000_000
# An intermittent stretch may begin well before the complaint (subd. 5: "continues for more
# than one hour"); windows starting up to a day before the span are considered.
LOOKBACK_NS = 24 * 3600 * NS

VERIFIED = "verified"
MISSING = "missing"  # no window with that device, rule and start in InfluxDB
REPLACED = "replaced"  # a window is there but its digest is not the linked one
FAILS = "does not verify"  # recomputation or the digest check disagrees
UNCHECKED = "not checked"  # InfluxDB could not be asked


@dataclass(frozen=True)
class LinkCheck:
    """The state of one link as read now; ``fields`` the stored window's content if found."""

    link: EvidenceLink
    state: str
    details: list[str] = field(default_factory=list)
    fields: dict[str, Any] | None = None

    @property
    def verified(self) -> bool:
        """True when the stored window is the linked one and recomputes identically."""
        return self.state == VERIFIED


def _overlaps(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 <= b1 and b0 <= a1


def candidate_windows(client: InfluxClient, complaint: Complaint,
                      placements: list[Placement]) -> list[StoredWindow]:
    """Stored windows of the address's devices whose span overlaps the complaint's span and
    that the device measured while it was placed there."""
    found: list[StoredWindow] = []
    for placement in placements:
        placed_end = placement.removed_ns if placement.removed_ns is not None else 2**63 - 1
        if not _overlaps(placement.placed_ns, placed_end, complaint.span_start_ns,
                         complaint.span_end_ns):
            continue
        for stored in load_windows(client, placement.device_id,
                                   complaint.span_start_ns - LOOKBACK_NS,
                                   complaint.span_end_ns):
            end_ns = int(stored.fields["end_ns"])
            if (_overlaps(stored.window.start_ns, end_ns, complaint.span_start_ns,
                          complaint.span_end_ns)
                    and placement.placed_ns <= stored.window.start_ns
                    and end_ns <= placed_end):
                found.append(stored)
    return sorted(found, key=lambda s: (s.window.start_ns, s.window.rule, s.window.device_id))


def link_covering_windows(store: CaseStore, client: InfluxClient, complaint_id: int,
                          officer: str) -> tuple[list[EvidenceLink], int]:
    """Link every stored window that covers the complaint's span (:func:`candidate_windows`)
    and is not linked yet, each with its audit entry (``barkwatch case link`` and the review
    app's "Link findings"); returns the links added and how many the complaint has now."""
    complaint = store.complaint(complaint_id)
    known = {link.digest for link in store.links(complaint.id)}
    added: list[int] = []
    for stored in candidate_windows(client, complaint, store.placements(complaint.address_id)):
        w = stored.window
        if w.digest in known:
            continue
        added.append(store.add_link(complaint.id, w.device_id, w.rule, w.start_ns,
                                    int(stored.fields["end_ns"]), w.digest, officer))
        known.add(w.digest)
    links = store.links(complaint.id)
    return [link for link in links if link.id in added], len(links)


def verify_link(client: InfluxClient, link: EvidenceLink) -> LinkCheck:
    """Read the linked window back and recompute it; never raises for InfluxDB trouble (the
    check says it was not made and why)."""
    try:
        stored = [s for s in load_windows(client, link.device_id, link.start_ns, link.start_ns)
                  if s.window.rule == link.rule]
        if not stored:
            return LinkCheck(link, MISSING, ["no stored window of this device, rule and start"])
        window = stored[0].window
        fields = json.loads(window.content)
        if window.digest != link.digest:
            return LinkCheck(link, REPLACED, [f"the stored window's digest is {window.digest}, "
                                              f"the link's {link.digest}"], fields)
        report = recompute(client, link.device_id, link.start_ns, link.start_ns)
    except (AnalyzerError, ValueError) as exc:
        return LinkCheck(link, UNCHECKED, [str(exc)])
    problems = [f"{m.kind}: {m.detail}" for m in report.mismatches
                if m.rule == link.rule and m.start_ns == link.start_ns]
    if problems:
        return LinkCheck(link, FAILS, problems, fields)
    return LinkCheck(link, VERIFIED, [], fields)
