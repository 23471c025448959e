"""Storing rule events in InfluxDB second by second, as the live analyzer stores them."""

from __future__ import annotations

from collections.abc import Callable

from influxdb_client import Point

from analyzer.acoustics.attribution import PremisesSector
from analyzer.detect import DogEvent
from analyzer.ordinance.evidence import EvidenceChain, dog_event_fields
from analyzer.ordinance.rules import COMPLETED, NS, RuleEngine, RuleEvent, RuleSettings
from analyzer.store import InfluxClient, event_point, window_point


def store_as_live(client: InfluxClient, device: str, events: list[RuleEvent], start_ns: int,
                  seconds: int, level: Callable[[int, int], Point | None],
                  sector: PremisesSector | None = None,
                  settings: RuleSettings | None = None) -> int:
    """Run the rules per one-second frame for ``seconds`` from ``start_ns`` and store each
    second's level point (``level(second, time_ns)``; None: no frame, a coverage gap), each
    event once it has ended (with its audibility fields) and every sealed window. Returns the
    number of windows. Events keep their bearing and origin; ``sector`` is the one the
    windows state; ``settings`` the rules' (their defaults when None)."""
    engine = RuleEngine(device, settings)
    chain = EvidenceChain({device: "12 Elm St"}, sectors={device: sector})
    lines: list[str] = []
    windows, pending = 0, sorted(events, key=lambda e: e.offset_ns)
    for second in range(seconds):
        start = start_ns + second * NS
        point = level(second, start)
        if point is None:
            continue
        lines.append(point.to_line_protocol())
        engine.observe_coverage(start, start + NS)
        while pending and pending[0].offset_ns <= start + NS:  # emitted when it has ended
            e = pending.pop(0)
            engine.add_event(e)
            event = event_point(DogEvent(device, e.onset_ns, e.offset_ns, e.label, e.confidence,
                                         e.laeq_db, e.lafmax_db, e.model_version,
                                         bearing_deg=e.bearing_deg,
                                         bearing_uncertainty_deg=e.bearing_uncertainty_deg,
                                         origin=e.origin))
            for name, value in dog_event_fields(e).items():
                event.field(name, value)
            lines.append(event.to_line_protocol())
        for finding in engine.advance(start + NS):
            if finding.status == COMPLETED:
                lines.append(window_point(chain.seal(finding)).to_line_protocol())
                windows += 1
    client.write_lines(lines)
    return windows
