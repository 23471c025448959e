"""Everything the live analyzer does with one device's frames, in capture order.

One pass per frame: the detector scores it and tracks events (:mod:`analyzer.detect`), each
event gets its bearing and origin against the premises' sector
(:mod:`analyzer.acoustics.attribution`, issue 36), its level 100 ft beyond the boundary and
audibility (:mod:`analyzer.acoustics`, when the device has an installation record), then the
rules take the events and the frame's coverage and the evidence code seals what they completed
(:mod:`analyzer.ordinance.findings`), and the results become InfluxDB points
(:mod:`analyzer.store.points`) and MQTT messages. The service owns the sockets. Time is always
capture time.

After a restart the rules are primed from what InfluxDB already holds (events and coverage of
the last ``PRIME_S``), so an episode in progress continues and nothing is counted twice;
findings re-derived while priming were stored before and are not sealed again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from influxdb_client import Point

from analyzer.acoustics import AudibilityAssessor, InstallationRecord
from analyzer.acoustics.attribution import attributed
from analyzer.config import AnalyzerConfig
from analyzer.detect import DevicePipeline, DogEvent
from analyzer.errors import InfluxUnavailable
from analyzer.ordinance import (
    DeviceRules,
    EvidenceChain,
    RuleEvent,
    progress_payload,
    progress_topic,
    rule_event,
)
from analyzer.store import (
    InfluxClient,
    background_point,
    event_point,
    load_chain_head,
    load_coverage,
    load_events,
    progress_point,
    window_point,
)
from sensor.wire import Frame

log = logging.getLogger(__name__)

PRIME_S = 6 * 3600  # stored history read at start-up: longer than any stretch in progress
PROGRESS_EVERY_NS = 10 * 1_000_000_000
BACKGROUND_EVERY_NS = 60 * 1_000_000_000


def progress_due(frame: Frame) -> bool:
    """Whether ``frame`` carries the rules' progress: the first frame captured in each
    ``PROGRESS_EVERY_NS`` of capture time (the frame a frame's length before it would lie in
    the period before). A function of the frame alone, so an analyzer that takes a device over
    mid-stream writes the same points as the one before it would have."""
    length = max(1, frame.end_ns - frame.capture_ns)
    return frame.capture_ns // PROGRESS_EVERY_NS != (frame.capture_ns - length) // PROGRESS_EVERY_NS


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
        self.sector = site.sector if site is not None else None
        self.rules = DeviceRules(device_id, config.rules, chain)
        self._next_background_ns = 0

    def prime(self, influx: InfluxClient, first_frame_ns: int) -> None:
        """Load the device's stored events, coverage and chain head (after a restart)."""
        start = first_frame_ns - PRIME_S * 1_000_000_000
        try:
            events = load_events(influx, self.device_id, start, first_frame_ns - 1)
            coverage = load_coverage(influx, self.device_id, start, first_frame_ns - 1)
            self.rules.chain.heads[self.device_id] = load_chain_head(influx, self.device_id)
        except InfluxUnavailable as exc:
            log.warning("could not read %s's stored history (%s); rules start afresh",
                        self.device_id, exc)
            return
        self.rules.prime(events, coverage)
        if events or coverage:
            log.info("%s: rules primed with %d stored event(s), %d s of coverage",
                     self.device_id, len(events), len(coverage))

    def finish(self) -> DeviceOutput:
        """The device went quiet (the analyzer frees its state): score the held-back steps and
        store the events still open. The rules are not closed: they are primed from InfluxDB
        again if the device returns, exactly as after a restart."""
        result = self.pipeline.finish()
        out = DeviceOutput(max_dog_score=result.max_dog_score)
        self._record_events(result.events, out)  # stored; the rules are freed with the device
        return out

    def _record_events(self, events: list[DogEvent], out: DeviceOutput) -> list[RuleEvent]:
        """Assess each event's audibility, add its point to ``out``; the events for the rules."""
        rule_events = []
        for found in events:
            event = attributed(found, self.pipeline.frame_bearings(found.onset_ns,
                                                                   found.offset_ns), self.sector)
            audibility = self.assessor.assess(event) if self.assessor is not None else None
            rule_events.append(rule_event(event, audibility))
            out.points.append(event_point(event, audibility))
        out.events += len(rule_events)
        return rule_events

    def feed(self, frame: Frame) -> DeviceOutput:
        """Process one frame in capture order."""
        result = self.pipeline.feed(frame)
        out = DeviceOutput(max_dog_score=result.max_dog_score)
        if self.assessor is not None:
            self.assessor.observe(frame, result.max_dog_score)
        rule_events = self._record_events(result.events, out)
        with_progress = progress_due(frame)
        ruling = self.rules.step(rule_events, frame.capture_ns, frame.end_ns, with_progress)
        for finding in ruling.ongoing:
            log.warning("%s: %s threshold crossed at capture time %d (ongoing)",
                        self.device_id, finding.rule, finding.threshold_crossed_ns)
        for finding, window in zip(ruling.completed, ruling.windows, strict=True):
            out.points.append(window_point(window))
            log.info("%s: %s finding completed, %.0f s", self.device_id, finding.rule,
                     finding.duration_s)
        out.findings = len(ruling.windows)
        if ruling.progress is not None:
            out.points.append(progress_point(ruling.progress))
            out.messages.append((progress_topic(self.device_id),
                                 progress_payload(ruling.progress)))
        if self.assessor is not None and frame.capture_ns >= self._next_background_ns:
            background = self.assessor.background.estimate()
            if background is not None:
                out.points.append(background_point(self.device_id, background, frame.end_ns))
            self._next_background_ns = frame.capture_ns + BACKGROUND_EVERY_NS
        return out
