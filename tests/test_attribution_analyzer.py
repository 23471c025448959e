"""Whose dog, through the analyzer (issue 36, item 4): each event's bearing from its dog
frames, its origin against the premises' sector, and the rules counted over all events and
over the sector's. A simulated two-dog scene: dog A inside the sector, dog B 45 degrees away
outside it."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest

from analyzer.acoustics import EventAudibility, InstallationRecord
from analyzer.acoustics.attribution import (
    ELSEWHERE,
    NO_BEARING,
    PREMISES,
    PremisesSector,
    attributed,
)
from analyzer.cli.analyze import write_text
from analyzer.config import AnalyzerConfig
from analyzer.detect.events import DogEvent
from analyzer.detect.pipeline import DevicePipeline
from analyzer.detect.settings import DetectorSettings
from analyzer.ingest.device import DeviceAnalysis
from analyzer.offline.analysis import frames_of_file, rule_findings
from analyzer.ordinance import EvidenceChain, EvidenceWindow, RuleSettings
from analyzer.ordinance.rules import Finding
from analyzer.store.influx import event_point
from sensor.frames import frames_from_samples
from sensor.wire import Frame
from tests.conftest import DEMO_RECORDING

NS = 1_000_000_000
SECTOR = PremisesSector(bearing_deg=90.0, half_width_deg=20.0)  # 70-110 degrees
DOG_A_DEG, DOG_B_DEG = 92.0, 135.0  # A in the sector, B 43 degrees away, outside it
UNCERTAINTY_DEG = 4.0
AUDIBLE = EventAudibility(
    level_at_100ft_db=48.0, lafmax_at_100ft_db=55.0, audibility_margin_db=12.0,
    plainly_audible=True, uncertainty_db=3.0, audibility_score=0.9,
    judged_from="estimate at the receiver", estimate_at_100ft_db=48.0,
    background_la90_db=35.0, background_source="bark-free", background_limited=False,
    dominant_band_hz=1000.0, band_levels_at_100ft_db=[], band_margins_db=[])


@pytest.fixture(scope="module")
def bark_and_quiet() -> tuple[Frame, Frame]:
    """The demo recording's most dog-like second, and one second of faint noise (25 dB)."""
    _, frames = frames_of_file(DEMO_RECORDING, 100.0)
    pipeline = DevicePipeline("pick", DetectorSettings())
    scores = [pipeline.feed(frame).max_dog_score for frame in frames]
    bark = frames[int(np.argmax(scores))]
    noise = 10 ** (-75 / 20) * np.random.default_rng(4).standard_normal(16000)
    return bark, next(frames_from_samples(noise, 16000, 100.0))


def _scene(bark: Frame, quiet: Frame, barks: dict[int, float], total_s: int) -> list[Frame]:
    """``total_s`` seconds; at each second of ``barks`` the bark with that bearing (the
    sensor's uncertainty UNCERTAINTY_DEG), quiet (no bearing) elsewhere."""
    frames = []
    for t in range(total_s):
        frame = (bark if t in barks else quiet).retimed(t * NS)
        if t in barks:
            frame = dataclasses.replace(frame, bearing_deg=barks[t],
                                        bearing_uncertainty_deg=UNCERTAINTY_DEG,
                                        bearing_estimated=True)
        frames.append(dataclasses.replace(frame, device_id="offline", seq=t))
    return frames


def _analysed(frames: list[Frame], sector: PremisesSector | None) -> list[DogEvent]:
    """The events of ``frames`` through the pipeline, each attributed as the analyzer does."""
    pipeline = DevicePipeline("offline", DetectorSettings())
    events: list[DogEvent] = []
    for frame in frames:
        for e in pipeline.feed(frame).events:
            events.append(attributed(e, pipeline.frame_bearings(e.onset_ns, e.offset_ns),
                                     sector))
    events.extend(attributed(e, pipeline.frame_bearings(e.onset_ns, e.offset_ns), sector)
                  for e in pipeline.finish().events)
    return events


def test_two_dogs_through_the_pipeline_each_event_takes_its_dogs_bearing_and_origin(
        bark_and_quiet: tuple[Frame, Frame]) -> None:
    bark, quiet = bark_and_quiet
    barks_a = {t: DOG_A_DEG for t in (10, 110, 210)}  # three barks, 100 s apart
    barks_b = {t: DOG_B_DEG for t in range(300, 781, 20)}  # every 20 s for 8 minutes
    events = _analysed(_scene(bark, quiet, barks_a | barks_b, 900), SECTOR)
    a = [e for e in events if e.onset_ns < 300 * NS]
    b = [e for e in events if e.onset_ns >= 290 * NS]
    assert len(a) == 3 and len(b) == len(barks_b)
    assert all(e.bearing_deg == DOG_A_DEG and e.origin == PREMISES for e in a)
    assert all(e.bearing_deg == DOG_B_DEG and e.origin == ELSEWHERE for e in b)
    assert all(e.bearing_uncertainty_deg == UNCERTAINTY_DEG for e in events)

    document = rule_findings(events, {}, [(0, 900 * NS)], None, "")
    assert document["origins"] == {PREMISES: 3, ELSEWHERE: 25, NO_BEARING: 0}
    # Dog B's 8 minutes make a continuous finding over all events; none "from the premises".
    assert [f["rule"] for f in document["findings"]] == ["continuous"]
    assert document["findings"][0]["start_s"] >= 290.0
    assert document["findings_from_premises"] == []


def test_the_live_analyzer_stores_each_events_origin_and_bearing(
        bark_and_quiet: tuple[Frame, Frame]) -> None:
    bark, quiet = bark_and_quiet
    site = InstallationRecord(device_id="offline", source_to_sensor_m=8.0,
                              source_to_boundary_m=12.0, sector=SECTOR)
    analysis = DeviceAnalysis("offline", AnalyzerConfig(), site, EvidenceChain())
    lines = []
    for frame in _scene(bark, quiet, {10: DOG_A_DEG, 40: DOG_B_DEG}, 70):
        lines += [p.to_line_protocol() for p in analysis.feed(frame).points]
    lines += [p.to_line_protocol() for p in analysis.finish().points]
    events = [line for line in lines if line.startswith("dog_event")]
    assert len(events) == 2
    assert 'origin="premises"' in events[0] and "bearing_deg=92" in events[0]
    assert 'origin="elsewhere"' in events[1] and "bearing_deg=135" in events[1]


class SealedWindows(EvidenceChain):
    """The chain, keeping every window it seals."""

    def __init__(self, sectors: dict[str, PremisesSector | None]) -> None:
        super().__init__(sectors=sectors)
        self.sealed: list[EvidenceWindow] = []

    def seal(self, finding: Finding) -> EvidenceWindow:
        window = super().seal(finding)
        self.sealed.append(window)
        return window


def test_the_live_analyzers_window_counts_the_rule_over_the_premises_events_too(
        bark_and_quiet: tuple[Frame, Frame]) -> None:
    bark, quiet = bark_and_quiet
    site = InstallationRecord(device_id="offline", source_to_sensor_m=8.0,
                              source_to_boundary_m=12.0, sector=SECTOR)
    chain = SealedWindows(sectors={"offline": SECTOR})  # as the service sets it from the site
    analysis = DeviceAnalysis("offline", AnalyzerConfig(), site, chain)
    barks = {t: DOG_A_DEG for t in (10, 110, 210)} | {t: DOG_B_DEG for t in range(300, 781, 20)}
    for frame in _scene(bark, quiet, barks, 1000):
        analysis.feed(frame)
    (window,) = chain.sealed
    content = window.fields
    assert content["rule"] == "continuous"
    assert content["from_premises"] == {
        "sector": {"bearing_deg": "90.000000", "half_width_deg": "20.000000"},
        "origins": {PREMISES: 0, ELSEWHERE: 25, NO_BEARING: 0}, "events_counted": 0,
        "start_ns": None, "end_ns": None, "longest_s": "0.000000", "holds": False}


def test_without_a_sector_or_a_bearing_every_event_has_no_bearing(
        bark_and_quiet: tuple[Frame, Frame]) -> None:
    bark, quiet = bark_and_quiet
    frames = _scene(bark, quiet, {10: DOG_A_DEG}, 30)
    (event,) = _analysed(frames, None)
    assert (event.bearing_deg, event.origin) == (DOG_A_DEG, NO_BEARING)
    no_bearing = [dataclasses.replace(f, bearing_deg=None, bearing_uncertainty_deg=None)
                  for f in frames]
    (event,) = _analysed(no_bearing, SECTOR)
    assert (event.bearing_deg, event.bearing_uncertainty_deg, event.origin) == (
        None, None, NO_BEARING)


def test_the_pipeline_forgets_bearings_no_event_can_span(
        bark_and_quiet: tuple[Frame, Frame]) -> None:
    bark, quiet = bark_and_quiet
    pipeline = DevicePipeline("offline", DetectorSettings())
    for frame in _scene(bark, quiet, {t: DOG_B_DEG for t in range(10, 200, 20)}, 230):
        pipeline.feed(frame)
    assert len(pipeline._bearings) <= 1  # not the ten barks'


def _event(t_s: int, bearing_deg: float) -> DogEvent:
    found = DogEvent("offline", t_s * NS, t_s * NS + NS // 2, "dog", 0.9, 70.0, 80.0, "m")
    return attributed(found, [(bearing_deg, UNCERTAINTY_DEG)], SECTOR)


def _both_rules(bearing_deg: float) -> list[DogEvent]:
    """Barking every 20 s for 8 minutes, then two barks 20 s apart every 5 minutes for 75
    minutes, plainly audible: a continuous and an intermittent finding, from ``bearing_deg``."""
    return [_event(t, bearing_deg) for t in [
        *range(0, 481, 20), *(t + d for t in range(1200, 5701, 300) for d in (0, 20))]]


def _pairs(*starts: int) -> list[int]:
    """Two barks 20 s apart from each start: each the other's company (intermittent rule)."""
    return [t + d for t in starts for d in (0, 20)]


def test_a_dog_outside_the_sector_makes_both_findings_over_all_events_none_from_premises(
        ) -> None:
    events = sorted(_both_rules(DOG_B_DEG) + [_event(t, DOG_A_DEG) for t in _pairs(600, 900)],
                    key=lambda e: e.onset_ns)
    audible = {e.onset_ns: AUDIBLE for e in events}
    document = rule_findings(events, audible, [(0, 7000 * NS)], None, "")
    assert document["origins"] == {PREMISES: 4, ELSEWHERE: 57, NO_BEARING: 0}
    assert sorted(f["rule"] for f in document["findings"]) == ["continuous", "intermittent"]
    assert document["findings_from_premises"] == []


def test_the_text_output_gives_the_origins_and_the_premises_findings() -> None:
    events = sorted(_both_rules(DOG_B_DEG) + [_event(t, DOG_A_DEG) for t in _pairs(600, 900)],
                    key=lambda e: e.onset_ns)
    document = {"duration_s": 7000.0, "events": [], "max_dog_score": 0.9,
                "full_scale_db": 120.0, "audibility": None,
                "rules": dataclasses.asdict(RuleSettings()),
                **rule_findings(events, {e.onset_ns: AUDIBLE for e in events},
                                [(0, 7000 * NS)], None, "")}
    out = io.StringIO()
    write_text(document, "scene.wav", out)
    text = out.getvalue()
    assert "  by bearing: 4 event(s) from the premises' sector, 57 from elsewhere, 0 with no " \
        "bearing (docs/BEARING.md); findings from the premises:\n    none\n" in text
    assert text.count("VIOLATION") == 2  # both over all events


def test_the_premises_dog_makes_both_findings_in_both_counts() -> None:
    events = sorted(_both_rules(DOG_A_DEG) + [_event(t, DOG_B_DEG) for t in _pairs(600, 900)],
                    key=lambda e: e.onset_ns)
    audible = {e.onset_ns: AUDIBLE for e in events}
    document = rule_findings(events, audible, [(0, 7000 * NS)], None, "")
    over_all = [(f["rule"], f["start_s"]) for f in document["findings"]]
    from_premises = [(f["rule"], f["start_s"]) for f in document["findings_from_premises"]]
    # Over all events dog B's barks at 600 and 900 s (pairs) close the 720 s gap (the intermittency
    # gap is 600 s): the stretch starts at 0; over the premises' events it starts at 1200.
    assert over_all == [("continuous", 0.0), ("intermittent", 0.0)]
    assert from_premises == [("continuous", 0.0), ("intermittent", 1200.0)]


def test_an_event_straddling_the_sectors_edge_counts_as_no_bearing() -> None:
    assert _event(0, 108.0).origin == NO_BEARING  # 104-112 crosses the edge at 110
    assert _event(0, 130.0).origin == ELSEWHERE


def test_the_event_point_carries_origin_and_bearing() -> None:
    line = event_point(_event(0, DOG_B_DEG)).to_line_protocol()
    assert 'origin="elsewhere"' in line
    assert "bearing_deg=135" in line and "bearing_uncertainty_deg=4" in line
    line = event_point(DogEvent("d", 0, NS, "dog", 0.9, 70.0, 80.0, "m")).to_line_protocol()
    assert 'origin="no bearing"' in line and "bearing_deg" not in line
