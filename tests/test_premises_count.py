"""Each evidence window counts its rule a second time, over the events from the premises'
sector (issue 36, item 4; analyzer/ordinance/premises.py), and ``findings recompute`` gives
the same count from the stored events' origins."""

from __future__ import annotations

from dataclasses import replace

from influxdb_client import Point, WritePrecision

from analyzer import __version__
from analyzer.acoustics.attribution import ELSEWHERE, NO_BEARING, PREMISES, PremisesSector
from analyzer.deploy.services import Services
from analyzer.detect.events import DogEvent
from analyzer.ordinance.evidence import (
    GENESIS_DIGEST,
    SCHEMA,
    SCHEMA_V1,
    EvidenceChain,
    dog_event_fields,
    seal,
)
from analyzer.ordinance.rules import CONTINUOUS, INTERMITTENT, NS, RuleEvent, RuleSettings, evaluate
from analyzer.store.evidence_store import recompute
from analyzer.store.influx import InfluxClient, InfluxSettings, event_point
from analyzer.store.points import window_point
from tests.live_replay import store_as_live

DEV = "dev-9"
T0 = 1_780_000_000 * NS
SECTOR = PremisesSector(bearing_deg=90.0, half_width_deg=20.0)
IN_SECTOR, OUTSIDE = (92.0, PREMISES), (135.0, ELSEWHERE)


def ev(onset_s: int, where: tuple[float, str], base_ns: int = 0) -> RuleEvent:
    bearing, origin = where
    return RuleEvent(DEV, base_ns + onset_s * NS, base_ns + onset_s * NS + NS, "dog", 0.9,
                     70.0, 82.5, "bark-cnn-1", plainly_audible=True,
                     audibility_margin_db=11.25, level_at_100ft_db=48.3, uncertainty_db=3.16,
                     audibility_score=0.871, bearing_deg=bearing, bearing_uncertainty_deg=4.0,
                     origin=origin)


def eight_minutes(split_s: int, base_ns: int = 0) -> list[RuleEvent]:
    """A bark every 20 s from 0 to 480 s: from the premises before ``split_s``, from
    elsewhere after."""
    return [ev(t, IN_SECTOR if t < split_s else OUTSIDE, base_ns) for t in range(0, 481, 20)]


def test_a_window_says_the_rule_does_not_hold_over_the_premises_events_alone() -> None:
    (finding,) = evaluate(DEV, eight_minutes(split_s=250), [(0, 600 * NS)])
    window = EvidenceChain(sectors={DEV: SECTOR}).seal(finding)
    assert window.fields["schema"] == SCHEMA and window.fields["duration_s"] == "481.000000"
    assert window.fields["from_premises"] == {
        "sector": {"bearing_deg": "90.000000", "half_width_deg": "20.000000"},
        "origins": {PREMISES: 13, ELSEWHERE: 12, NO_BEARING: 0}, "events_counted": 13,
        "start_ns": 0, "end_ns": 241 * NS, "longest_s": "241.000000", "holds": False}


def test_a_window_says_the_rule_holds_over_the_premises_events_alone() -> None:
    (finding,) = evaluate(DEV, eight_minutes(split_s=10_000), [(0, 600 * NS)])
    premises = EvidenceChain(sectors={DEV: SECTOR}).seal(finding).fields["from_premises"]
    assert (premises["longest_s"], premises["holds"]) == ("481.000000", True)


def test_the_premises_count_is_the_rule_over_the_premises_events_alone() -> None:
    # The premises' dog's 8 minutes, then two barks 20 s apart every 5 minutes for 75
    # minutes; pairs of barks from elsewhere at 600 and 900 s bridge the 720 s pause over
    # all events only.
    events = sorted([*eight_minutes(split_s=10_000),
                     *(ev(t + d, OUTSIDE) for t in (600, 900) for d in (0, 20)),
                     *(ev(t + d, IN_SECTOR) for t in range(1200, 5701, 300) for d in (0, 20))],
                    key=lambda e: e.key)
    coverage = [(0, 7000 * NS)]
    over_all = evaluate(DEV, events, coverage)
    alone = evaluate(DEV, [e for e in events if e.origin == PREMISES], coverage)
    assert [(f.rule, f.start_ns) for f in over_all] == [(CONTINUOUS, 0), (INTERMITTENT, 0)]
    assert [(f.rule, f.start_ns) for f in alone] == [(CONTINUOUS, 0), (INTERMITTENT, 1200 * NS)]
    chain = EvidenceChain(sectors={DEV: SECTOR})
    counts = [chain.seal(f).fields["from_premises"] for f in over_all]
    assert [(c["start_ns"], c["end_ns"], c["holds"]) for c in counts] == [
        (f.start_ns, f.end_ns, True) for f in alone]


def test_a_window_without_a_sector_entered_says_so_and_attributes_nothing() -> None:
    events = [replace(e, origin=NO_BEARING) for e in eight_minutes(split_s=10_000)]
    (finding,) = evaluate(DEV, events, [(0, 600 * NS)])
    premises = EvidenceChain().seal(finding).fields["from_premises"]
    assert premises["sector"] is None and premises["holds"] is False
    assert premises["origins"] == {PREMISES: 0, ELSEWHERE: 0, NO_BEARING: 25}


def _level(second: int, time_ns: int) -> Point:
    return (Point("level").tag("device", DEV).field("seq", second)
            .field("max_dog_score", 0.1).time(time_ns, WritePrecision.NS))


def test_recompute_gives_the_same_premises_count_and_reports_an_altered_origin(
        services: Services) -> None:
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    client.create_database()
    events = eight_minutes(split_s=250, base_ns=T0)
    assert store_as_live(client, DEV, events, T0, 700, _level, SECTOR) == 1
    report = recompute(client, DEV, T0, T0 + 700 * NS)
    assert report.ok, report.mismatches
    assert (report.stored, report.verified) == (1, 1)

    moved = replace(events[20], origin=PREMISES)  # one bark from elsewhere re-labelled
    client.write_lines([event_point(DogEvent(DEV, moved.onset_ns, moved.offset_ns, "dog", 0.9,
                                             70.0, 82.5, "bark-cnn-1", 135.0, 4.0,
                                             PREMISES)).to_line_protocol()])
    (mismatch,) = recompute(client, DEV, T0, T0 + 700 * NS).mismatches
    assert mismatch.kind == "differs"
    assert "events_sha256" in mismatch.detail and "from_premises" in mismatch.detail


def test_a_premises_bark_whose_only_company_came_from_elsewhere_is_not_counted_from_there(
        ) -> None:
    # The premises' dog: two barks 20 s apart every 5 minutes for 75 minutes (a stretch of
    # 4,521 s). At 4,800 s one more premises bark, 20 s before a bark from elsewhere: over all
    # events the two are each other's company and extend the stretch; over the premises'
    # events alone that bark has none, so the premises' stretch ends at 4,521 s.
    events = [*(ev(t + d, IN_SECTOR) for t in range(0, 4501, 300) for d in (0, 20)),
              ev(4800, IN_SECTOR), ev(4820, OUTSIDE)]
    (finding,) = [f for f in evaluate(DEV, events, [(0, 6000 * NS)]) if f.rule == INTERMITTENT]
    assert (finding.end_ns, len(finding.counted)) == (4821 * NS, 34)
    premises = EvidenceChain(sectors={DEV: SECTOR}).seal(finding).fields["from_premises"]
    assert premises["origins"] == {PREMISES: 33, ELSEWHERE: 1, NO_BEARING: 0}
    assert (premises["events_counted"], premises["end_ns"], premises["holds"]) == (
        32, 4521 * NS, True)


def test_a_window_sealed_before_the_premises_count_recomputes_as_it_was_sealed(
        services: Services) -> None:
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    client.create_database()
    events = [replace(e, bearing_deg=None, bearing_uncertainty_deg=None, origin=NO_BEARING)
              for e in eight_minutes(split_s=0, base_ns=T0)]
    # read as before issue 39's company (schema 3): every plainly audible event counts
    (finding,) = evaluate(DEV, events, [(T0, T0 + 700 * NS)],
                          RuleSettings(intermittent_company_s=0.0))
    window = seal(finding, GENESIS_DIGEST, "12 Elm St", __version__, schema=SCHEMA_V1)
    assert "from_premises" not in window.fields
    lines = [_level(s, T0 + s * NS).to_line_protocol() for s in range(700)]
    for e in events:  # stored as before issue 36: no origin field
        point = (Point("dog_event").tag("device", DEV).tag("label", "dog")
                 .time(e.onset_ns, WritePrecision.NS).field("offset_ns", e.offset_ns)
                 .field("confidence", 0.9).field("laeq_db", 70.0).field("lafmax_db", 82.5)
                 .field("model_version", "bark-cnn-1"))
        for name, value in dog_event_fields(e).items():
            point.field(name, value)
        lines.append(point.to_line_protocol())
    client.write_lines([*lines, window_point(window).to_line_protocol()])
    report = recompute(client, DEV, T0, T0 + 700 * NS)
    assert report.ok, report.mismatches
    assert report.verified == 1
