"""Everything the live analyzer does with one device's frames, in capture order.

Per frame: score it and track events (:mod:`analyzer.detect.pipeline`), assess each event's level
100 ft beyond the boundary and audibility (:mod:`analyzer.acoustics.audibility`, when the device has an
installation record), feed the ordinance rules (:mod:`analyzer.ordinance.rules`) with the event and the
frame's coverage, seal completed findings into the device's evidence chain
(:mod:`analyzer.ordinance.evidence`), and report the rules' progress. It returns InfluxDB points and
MQTT messages; the service owns the sockets. Time is always capture time.

After a restart the rule engine is primed from what InfluxDB already holds (events and
coverage of the last ``PRIME_S``), so an episode in progress continues and nothing is counted
twice; findings re-derived while priming were stored before and are not sealed again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from influxdb_client import Point

from analyzer.acoustics.audibility import AudibilityAssessor
from analyzer.acoustics.site import InstallationRecord
from analyzer.config import AnalyzerConfig
from analyzer.detect.pipeline import DevicePipeline
from analyzer.errors import InfluxUnavailable
from analyzer.ordinance.evidence import (
    EvidenceChain,
    progress_payload,
    progress_point,
    progress_topic,
    window_point,
)
from analyzer.ordinance.rules import RuleEngine, rule_event
from analyzer.store.evidence_store import load_chain_head, load_coverage, load_events
from analyzer.store.influx import InfluxClient, background_point, event_point
from sensor.wire import Frame

log = logging.getLogger(__name__)

PRIME_S = 6 * 3600  # stored history read at start-up: longer than any stretch in progress
PROGRESS_EVERY_NS = 10 * 1_000_000_000
BACKGROUND_EVERY_NS = 60 * 1_000_000_000


@dataclass
class DeviceOutput:
    """What one frame produced: its highest dog score, points to store, messages to publish."""

    max_dog_score: float
    points: list[Point] = field(default_factory=list)
    messages: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    events: int = 0
    findings: int = 0


class DeviceAnalysis:
    """Pipeline, audibility, rules and evidence chain of one device."""

    def __init__(self, device_id: str, config: AnalyzerConfig,
                 site: InstallationRecord | None, chain: EvidenceChain) -> None:
        self.device_id = device_id
        self.pipeline = DevicePipeline(device_id, config.detector)
        self.assessor = AudibilityAssessor(site, config.audibility) if site else None
        self.engine = RuleEngine(device_id, config.rules)
        self.chain = chain
        self._next_progress_ns = 0
        self._next_background_ns = 0

    def prime(self, influx: InfluxClient, first_frame_ns: int) -> None:
        """Load the device's stored events, coverage and chain head (after a restart)."""
        start = first_frame_ns - PRIME_S * 1_000_000_000
        try:
            events = load_events(influx, self.device_id, start, first_frame_ns - 1)
            coverage = load_coverage(influx, self.device_id, start, first_frame_ns - 1)
            self.chain.heads[self.device_id] = load_chain_head(influx, self.device_id)
        except InfluxUnavailable as exc:
            log.warning("could not read %s's stored history (%s); rules start afresh",
                        self.device_id, exc)
            return
        for begin, end in coverage:
            self.engine.observe_coverage(begin, end)
        for event in events:
            self.engine.add_event(event)
        if coverage:
            stored_until = max(end for _, end in coverage)
            self.engine.advance(stored_until)  # findings up to here were stored before
        if events or coverage:
            log.info("%s: rules primed with %d stored event(s), %d s of coverage",
                     self.device_id, len(events), len(coverage))

    def feed(self, frame: Frame) -> DeviceOutput:
        """Process one frame in capture order."""
        result = self.pipeline.feed(frame)
        out = DeviceOutput(max_dog_score=result.max_dog_score)
        if self.assessor is not None:
            self.assessor.observe(frame, result.max_dog_score)
        self.engine.observe_coverage(frame.capture_ns, frame.end_ns)
        for event in result.events:
            audibility = self.assessor.assess(event) if self.assessor is not None else None
            self.engine.add_event(rule_event(event, audibility))
            out.points.append(event_point(event, audibility))
            out.events += 1
        for finding in self.engine.advance(frame.end_ns):
            if finding.status == "completed":
                out.points.append(window_point(self.chain.seal(finding)))
                out.findings += 1
                log.info("%s: %s finding completed, %.0f s", self.device_id, finding.rule,
                         finding.duration_s)
            else:
                log.warning("%s: %s threshold crossed at capture time %d (ongoing)",
                            self.device_id, finding.rule, finding.threshold_crossed_ns)
        if frame.capture_ns >= self._next_progress_ns:
            progress = self.engine.progress(frame.end_ns)
            out.points.append(progress_point(progress))
            out.messages.append((progress_topic(self.device_id), progress_payload(progress)))
            self._next_progress_ns = frame.capture_ns + PROGRESS_EVERY_NS
        if self.assessor is not None and frame.capture_ns >= self._next_background_ns:
            background = self.assessor.background.estimate()
            if background is not None:
                out.points.append(background_point(self.device_id, background, frame.end_ns))
            self._next_background_ns = frame.capture_ns + BACKGROUND_EVERY_NS
        return out
