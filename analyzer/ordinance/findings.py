"""From events to sealed findings in one pass: the rules decide, then the evidence code seals.

The one place that orders the two: :class:`DeviceRules` (live, one call per frame) and
:func:`findings_for_events` (a whole file at once). The evidence code never calls the rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from analyzer import __version__
from analyzer.acoustics import EventAudibility
from analyzer.acoustics.attribution import PremisesSector
from analyzer.detect import DogEvent
from analyzer.ordinance.evidence import EvidenceChain, EvidenceWindow, window_fields
from analyzer.ordinance.rules import (
    COMPLETED,
    NS,
    Finding,
    Progress,
    RuleEngine,
    RuleEvent,
    RuleSettings,
    evaluate,
    rule_event,
)


@dataclass
class Ruling:
    """What one frame's events and coverage changed: windows sealed for completed findings,
    findings raised and still ongoing, and the rules' progress when it was asked for."""

    windows: list[EvidenceWindow] = field(default_factory=list)
    completed: list[Finding] = field(default_factory=list)
    ongoing: list[Finding] = field(default_factory=list)
    progress: Progress | None = None


class DeviceRules:
    """Both rules and the evidence chain of one device, fed once per frame in capture order."""

    def __init__(self, device_id: str, settings: RuleSettings, chain: EvidenceChain) -> None:
        self.device_id = device_id
        self.engine = RuleEngine(device_id, settings)
        self.chain = chain

    def prime(self, events: Iterable[RuleEvent], coverage: Sequence[tuple[int, int]]) -> None:
        """Continue from stored history (after a restart): findings up to the end of the
        stored coverage were sealed before and are not sealed again."""
        for begin, end in coverage:
            self.engine.observe_coverage(begin, end)
        for event in events:
            self.engine.add_event(event)
        if coverage:
            self.engine.advance(max(end for _, end in coverage))

    def step(self, events: Sequence[RuleEvent], start_ns: int, end_ns: int,
             with_progress: bool) -> Ruling:
        """A frame measured [start_ns, end_ns) and ended ``events``: the rules advance to
        ``end_ns``, then each completed finding is sealed, in chain order."""
        self.engine.observe_coverage(start_ns, end_ns)
        for event in events:
            self.engine.add_event(event)
        ruling = Ruling()
        for finding in self.engine.advance(end_ns):
            if finding.status == COMPLETED:
                ruling.completed.append(finding)
            else:
                ruling.ongoing.append(finding)
        if with_progress:
            ruling.progress = self.engine.progress(end_ns)
        ruling.windows = [self.chain.seal(finding) for finding in ruling.completed]
        return ruling


def findings_for_events(
    events: Iterable[DogEvent],
    audibility_by_event: Mapping[int, EventAudibility | None],
    coverage: Iterable[tuple[int, int]],
    settings: RuleSettings | None = None,
    device_id: str = "offline",
    site: str = "",
    software_version: str = __version__,
    sector: PremisesSector | None = None,
) -> list[dict[str, Any]]:
    """Offline findings: ``audibility_by_event`` keyed by onset_ns (missing = not assessed),
    ``coverage`` the measured [start_ns, end_ns) intervals (offline: (0, frames * 1 s)).
    Each finding: ``rule``, ``start_s``, ``end_s``, ``duration_s``, ``violation`` (seconds
    from the file start), then the window's content, ``digest`` and ``prev_digest``;
    ``sector`` the premises' sector the events were attributed against (``from_premises``)."""
    rule_events = [rule_event(e, audibility_by_event.get(e.onset_ns)) for e in events]
    chain = EvidenceChain({device_id: site}, software_version=software_version,
                          sectors={device_id: sector})
    out: list[dict[str, Any]] = []
    for finding in evaluate(device_id, rule_events, coverage, settings):
        window = chain.seal(finding)
        fields = window_fields(finding, window.fields["prev_digest"], site, software_version,
                               sector)
        out.append({"rule": finding.rule, "start_s": round(finding.start_ns / NS, 3),
                    "end_s": round(finding.end_ns / NS, 3),
                    "duration_s": round(finding.duration_s, 3), "violation": True,
                    **{k: v for k, v in fields.items() if k not in ("rule", "duration_s")},
                    "digest": window.digest})
    return out
