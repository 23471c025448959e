"""Evidence windows: canonical form, chained digests, tamper detection, storage, recompute."""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import replace

import pytest
from influxdb_client import Point, WritePrecision

from analyzer.acoustics.audibility import EventAudibility
from analyzer.cli.findings import add_findings_parser, parse_time_ns, run_findings
from analyzer.deploy.services import Services
from analyzer.detect.events import DogEvent
from analyzer.ordinance.evidence import (
    GENESIS_DIGEST,
    EvidenceChain,
    EvidenceError,
    canonical_json,
    dog_event_fields,
    event_record,
    progress_payload,
    progress_topic,
    seal,
)
from analyzer.ordinance.findings import findings_for_events
from analyzer.ordinance.rules import (
    COMPLETED,
    CONTINUOUS,
    INTERMITTENT,
    NS,
    RuleEngine,
    RuleEvent,
    RuleSettings,
    evaluate,
)
from analyzer.store.evidence_store import load_chain_head, recompute
from analyzer.store.influx import InfluxClient, InfluxSettings, event_point
from analyzer.store.points import progress_point, window_point
from tests.live_replay import store_as_live

DEV = "dev-7"
T0 = 1_780_000_000 * NS


def ev(onset_s: float, offset_s: float, audible: bool = True, laeq_db: float = 70.0,
       base_ns: int = 0) -> RuleEvent:
    return RuleEvent(DEV, base_ns + round(onset_s * NS), base_ns + round(offset_s * NS), "dog",
                     0.91, laeq_db, 82.5, "bark-cnn-1", plainly_audible=audible,
                     audibility_margin_db=11.25 if audible else -2.5, level_at_100ft_db=48.3,
                     uncertainty_db=3.16, audibility_score=0.871)


def scenario(base_ns: int = 0) -> list[RuleEvent]:
    """8 min of barking every 20 s, then 75 min of audible pairs of barks (20 s apart: each
    the other's company) every 5 min."""
    continuous = [ev(t, t + 1.0, base_ns=base_ns) for t in range(0, 481, 20)]
    intermittent = [ev(t + d, t + d + 1.0, base_ns=base_ns) for t in range(1200, 5701, 300)
                    for d in (0, 20)]
    return continuous + intermittent


def test_canonical_json_sorts_keys_and_fixes_floats() -> None:
    text = canonical_json({"b": 1.0, "a": [True, None, -0.0000001, "é", 7]})
    assert text == '{"a":[true,null,"0.000000","\\u00e9",7],"b":"1.000000"}'
    with pytest.raises(EvidenceError, match="nan"):
        canonical_json({"x": float("nan")})


def test_windows_chain_and_a_third_party_can_verify_them_with_hashlib() -> None:
    found = evaluate(DEV, scenario(), [(0, 7000 * NS)])
    assert [f.rule for f in found] == [CONTINUOUS, INTERMITTENT]
    chain = EvidenceChain({DEV: "12 Elm St"})
    first, second = (chain.seal(f) for f in found)
    assert first.fields["prev_digest"] == GENESIS_DIGEST
    assert second.fields["prev_digest"] == first.digest
    for window, finding in ((first, found[0]), (second, found[1])):
        assert hashlib.sha256(window.content.encode()).hexdigest() == window.digest
        records = json.dumps([json.loads(canonical_json(event_record(e)))
                              for e in finding.events], sort_keys=True, separators=(",", ":"))
        assert hashlib.sha256(records.encode()).hexdigest() == window.fields["events_sha256"]
    fields = first.fields
    assert fields["events_counted"] == 25 and fields["longest_gap_s"] == "19.000000"
    assert fields["parameters"]["continuity_gap_s"] == "60.000000"
    assert [row["holds"] for row in fields["sensitivity"]] == [True, True, True]
    assert second.fields["audible_events"] == 32 and second.fields["site"] == "12 Elm St"


def test_altering_one_event_changes_the_recomputed_digest() -> None:
    events = scenario()
    original = [seal(f, GENESIS_DIGEST, "") for f in evaluate(DEV, events, [(0, 7000 * NS)])]
    events[3] = replace(events[3], laeq_db=70.01)
    again = [seal(f, GENESIS_DIGEST, "") for f in evaluate(DEV, events, [(0, 7000 * NS)])]
    assert original[0].digest != again[0].digest
    assert original[1].digest == again[1].digest  # the other window does not rest on it


def test_only_completed_findings_are_sealed() -> None:
    engine = RuleEngine(DEV, RuleSettings(reorder_window_s=0.0))
    engine.observe_coverage(0, 600 * NS)
    raised = []
    for e in scenario()[:25]:
        engine.add_event(e)
        raised += engine.advance(e.offset_ns)
    assert raised and raised[0].status != COMPLETED
    with pytest.raises(EvidenceError, match="only completed"):
        seal(raised[0], GENESIS_DIGEST, "")


def test_offline_findings_carry_the_required_keys_in_seconds() -> None:
    events = [DogEvent("offline", e.onset_ns, e.offset_ns, "dog", 0.9, 70.0, 80.0, "m")
              for e in scenario()[:25]]
    audibility = EventAudibility(
        level_at_100ft_db=48.0, lafmax_at_100ft_db=55.0, audibility_margin_db=12.3456,
        plainly_audible=True, uncertainty_db=3.2, audibility_score=0.9,
        judged_from="estimate at the receiver", estimate_at_100ft_db=48.0,
        background_la90_db=35.0, background_source="bark-free", background_limited=False,
        dominant_band_hz=1000.0, band_levels_at_100ft_db=[], band_margins_db=[])
    by_onset = {e.onset_ns: audibility for e in events}
    (finding,) = findings_for_events(events, by_onset, [(0, 600 * NS)])
    assert {"rule", "start_s", "end_s", "duration_s", "violation"} <= set(finding)
    assert (finding["rule"], finding["start_s"], finding["end_s"]) == (CONTINUOUS, 0.0, 481.0)
    assert finding["violation"] is True and finding["duration_s"] == 481.0
    assert finding["audibility"]["margin_db_min"] == 12.35
    assert finding["coverage"]["uncovered_after_end_s"] == 0.0
    json.dumps(finding)


def test_points_payloads_and_event_fields() -> None:
    (finding, _) = evaluate(DEV, scenario(T0), [(T0, T0 + 7000 * NS)])
    line = window_point(seal(finding, GENESIS_DIGEST, "x")).to_line_protocol()
    assert line.startswith("evidence_window,device=dev-7,rule=continuous ")
    assert line.endswith(f" {T0}") and "digest=" in line and "events_counted=25i" in line
    engine = RuleEngine(DEV)
    for e in scenario(T0)[:3]:
        engine.add_event(e)
    progress = engine.progress(T0 + 45 * NS)
    payload = progress_payload(progress)
    assert payload["episode_s"] == 41.0 and payload["episode_events"] == 3
    assert progress_topic(DEV) == "barkwatch/v1/progress/dev-7"
    assert "rule_progress,device=dev-7 " in progress_point(progress).to_line_protocol()
    assert "plainly_audible" not in dog_event_fields(replace(scenario()[0],
                                                              plainly_audible=None))


def test_time_arguments_accept_iso_and_ns() -> None:
    assert parse_time_ns("2026-06-01T00:00:00Z") == 1780272000 * NS
    assert parse_time_ns("1780272000000000001") == 1780272000000000001
    with pytest.raises(argparse.ArgumentTypeError, match="time zone"):
        parse_time_ns("2026-06-01T00:00:00")


# --- a real InfluxDB ---------------------------------------------------------------------------

def _store_live(client: InfluxClient, events: list[RuleEvent], outage: tuple[int, int]) -> int:
    """Run the engine as the live analyzer would (per one-second frame) and store everything."""

    def level(second: int, time_ns: int) -> Point | None:
        if outage[0] <= second < outage[1]:
            return None
        return (Point("level").tag("device", DEV).field("seq", second)
                .field("max_dog_score", 0.1).time(time_ns, WritePrecision.NS))

    return store_as_live(client, DEV, events, T0, 6500, level)


def _cli(url: str, *extra: str) -> int:
    parser = argparse.ArgumentParser()
    add_findings_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["findings", "recompute", "--device", DEV, "--from", str(T0),
                              "--to", str(T0 + 7000 * NS), "--influx-url", url, *extra])
    return run_findings(args)


def test_stored_windows_are_recomputed_identically_and_tampering_is_reported(
        services: Services, capsys: pytest.CaptureFixture[str]) -> None:
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    client.create_database()
    events = scenario(T0)
    assert _store_live(client, events, outage=(3020, 3080)) == 2

    report = recompute(client, DEV, T0, T0 + 7000 * NS)
    assert report.ok, report.mismatches
    assert (report.stored, report.recomputed, report.verified) == (2, 2, 2)
    stretch = json.loads(client.query("SELECT content FROM evidence_window WHERE "
                                      "rule = 'intermittent'")[0]["values"][0][1])
    assert stretch["coverage"]["uncovered_s"] == "60.000000"
    assert load_chain_head(client, DEV) != GENESIS_DIGEST
    assert _cli(services.influx.url) == 0

    altered = replace(events[3], laeq_db=71.0)  # rewrite one stored event
    point = event_point(DogEvent(DEV, altered.onset_ns, altered.offset_ns, "dog",
                                 altered.confidence, altered.laeq_db, altered.lafmax_db,
                                 altered.model_version))
    client.write_lines([point.to_line_protocol()])
    report = recompute(client, DEV, T0, T0 + 7000 * NS)
    (mismatch,) = report.mismatches
    assert (mismatch.kind, mismatch.rule) == ("differs", CONTINUOUS)
    assert "events_sha256" in mismatch.detail and "levels" in mismatch.detail
    capsys.readouterr()
    assert _cli(services.influx.url, "--format", "json") == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False
