"""Verdicts on a finding's events (issue 35, event review): the case file's record of them
(schema migration 6, supersession, the audit log) and the finding judged again without the
rejected events (analyzer.ordinance.rejudge), with known answers."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from analyzer.cases import CaseError, CaseFile, CaseStore, migrate
from analyzer.cases.localtime import parse_local_time
from analyzer.cases.schema import schema_version
from analyzer.cases.verdicts import (
    add_event_verdict,
    current_verdicts,
    event_verdicts,
    find_event,
)
from analyzer.ordinance import RuleEvent, RuleSettings, evaluate
from analyzer.ordinance.rejudge import event_key, without_rejected

NS = 1_000_000_000
T0 = parse_local_time("2026-06-01 21:00")
DEVICE = "glencoe-0001"
OFFICER = "Ofc. Lund"


class Clock:
    def __init__(self) -> None:
        self.now = T0 + 3600 * NS

    def __call__(self) -> int:
        self.now += NS
        return self.now


def bark(t_s: int, audible: bool | None = True) -> RuleEvent:
    return RuleEvent(DEVICE, T0 + t_s * NS, T0 + t_s * NS + NS, "bark", 0.9, 68.0, 80.0,
                     "head-1", plainly_audible=audible)


def episode() -> list[RuleEvent]:
    """A bark every 20 s from 0 to 480 s: one continuous episode of 481 s (> 420 s)."""
    return [bark(t) for t in range(0, 481, 20)]


def linked(store: CaseStore) -> int:
    address = store.add_address("12 Elm St", OFFICER)
    complaint = store.open_complaint(address, "Ann Neighbour", "555-0101", T0 + 600 * NS, T0,
                                     T0 + 1200 * NS, True, OFFICER)
    return store.add_link(complaint, DEVICE, "continuous", T0, T0 + 481 * NS, "a" * 64,
                          OFFICER)


def test_a_later_verdict_supersedes_the_earlier_and_both_stay_audited(tmp_path: Path) -> None:
    with CaseFile(tmp_path / "cases.sqlite", Clock()) as store:
        link = linked(store)
        first = add_event_verdict(store, link, T0 + 20 * NS, T0 + 21 * NS, "bark", "rejected",
                                  "a door slamming", OFFICER)
        second = add_event_verdict(store, link, T0 + 20 * NS, T0 + 21 * NS, "bark",
                                   "confirmed", "", "Ofc. Kay")
        other = add_event_verdict(store, link, T0 + 40 * NS, T0 + 41 * NS, "bark", "confirmed",
                                  "heard it myself", OFFICER)
        history = event_verdicts(store, link)
        now = current_verdicts(store, link)
        audit = [e for e in store.audit() if e.entity == "event_verdicts"]
        complaint_audit = store.audit(store.links(1)[0].complaint_id)
    assert [(v.id, v.verdict, v.supersedes) for v in history] == [
        (first, "rejected", None), (second, "confirmed", first), (other, "confirmed", None)]
    assert {k: v.id for k, v in now.items()} == {(T0 + 20 * NS, "bark"): second,
                                                 (T0 + 40 * NS, "bark"): other}
    assert [(e.action, e.actor, e.entity_id) for e in audit] == [
        ("rejected event", OFFICER, first),
        (f"confirmed event (supersedes verdict {first})", "Ofc. Kay", second),
        ("confirmed event", OFFICER, other)]
    assert json.loads(audit[0].detail)["reason"] == "a door slamming"
    assert audit[-1] == complaint_audit[-1]  # found by the complaint's audit too


def test_a_rejection_without_a_reason_is_refused_and_leaves_no_trace(tmp_path: Path) -> None:
    with CaseFile(tmp_path / "cases.sqlite", Clock()) as store:
        link = linked(store)
        entries = len(store.audit())
        with pytest.raises(CaseError, match="a rejected event needs a reason"):
            add_event_verdict(store, link, T0, T0 + NS, "bark", "rejected", "  ", OFFICER)
        with pytest.raises(CaseError, match="verdict 'maybe' is not one of"):
            add_event_verdict(store, link, T0, T0 + NS, "bark", "maybe", "x", OFFICER)
        with pytest.raises(CaseError, match="no event of this finding starts at"):
            add_event_verdict(store, link, T0 + 600 * NS, T0 + 601 * NS, "bark", "confirmed",
                              "", OFFICER)
        with pytest.raises(CaseError, match="no evidence link 99"):
            add_event_verdict(store, 99, T0, T0 + NS, "bark", "confirmed", "", OFFICER)
        assert event_verdicts(store, link) == [] and len(store.audit()) == entries


def test_the_schema_refuses_a_rejection_without_a_reason_and_a_second_supersession(
        tmp_path: Path) -> None:
    with CaseFile(tmp_path / "cases.sqlite", Clock()) as store:
        link = linked(store)
        first = add_event_verdict(store, link, T0, T0 + NS, "bark", "confirmed", "", OFFICER)
        add_event_verdict(store, link, T0, T0 + NS, "bark", "rejected", "a bird", OFFICER)
        insert = ("INSERT INTO event_verdicts (link_id, complaint_id, onset_ns, offset_ns, "
                  "label, verdict, reason, officer, at_ns, supersedes) VALUES "
                  "(?, 1, ?, ?, 'bark', ?, ?, 'x', 1, ?)")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            store.db.execute(insert, (link, T0, T0 + NS, "rejected", "", None))
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            store.db.execute(insert, (link, T0, T0 + NS, "confirmed", "", first))


def test_a_file_of_schema_5_gains_the_verdicts_table_and_keeps_its_links(
        tmp_path: Path) -> None:
    path = tmp_path / "cases.sqlite"
    connection = sqlite3.connect(path)
    migrate(connection, 5)
    connection.executescript(
        "INSERT INTO addresses (premises, created_ns) VALUES ('12 Elm St', 1);"
        "INSERT INTO complaints (address_id, complainant_name, complainant_contact, "
        "complainant_role, received_ns, span_start_ns, span_end_ns, contemporaneous, officer) "
        f"VALUES (1, 'A', 'B', 'resident', {T0}, {T0}, {T0 + NS}, 1, 'O');"
        "INSERT INTO evidence_links (complaint_id, device_id, rule, start_ns, end_ns, digest, "
        f"linked_ns, officer) VALUES (1, '{DEVICE}', 'continuous', {T0}, {T0 + 481 * NS}, "
        f"'{'b' * 64}', 1, 'O');")
    connection.close()
    with CaseFile(path, Clock()) as store:
        assert schema_version(store.db) == 6
        assert len(store.links(1)) == 1
        add_event_verdict(store, 1, T0, T0 + NS, "bark", "confirmed", "", OFFICER)
        assert len(event_verdicts(store, 1)) == 1


def test_an_event_is_found_by_its_onset_and_label_or_refused_by_name() -> None:
    events = [bark(0), bark(20), RuleEvent(DEVICE, T0 + 20 * NS, T0 + 22 * NS, "howl", 0.8,
                                           60.0, 70.0, "head-1")]
    assert find_event(events, T0).onset_ns == T0
    assert find_event(events, T0 + 20 * NS, "howl").label == "howl"
    with pytest.raises(CaseError, match="2 events start at .* name one by its label"):
        find_event(events, T0 + 20 * NS)
    with pytest.raises(CaseError, match="the finding has no event at"):
        find_event(events, T0 + 5 * NS)


def _rejudged(rejected_s: list[int], events: list[RuleEvent] | None = None,
              rule: str = "continuous") -> tuple[bool, float, int, int, int]:
    events = episode() if events is None else events
    coverage = [(T0 - 60 * NS, T0 + 600 * NS)]
    result = without_rejected(DEVICE, rule, RuleSettings(), events, coverage,
                              {event_key(bark(t)) for t in rejected_s})
    return (result.holds, result.longest_s, result.events_counted, result.parts_holding,
            result.rejected)


def test_with_nothing_rejected_the_finding_is_judged_as_it_was_sealed() -> None:
    sealed = evaluate(DEVICE, episode(), [(T0 - 60 * NS, T0 + 600 * NS)])
    assert [(f.rule, f.duration_s, len(f.counted)) for f in sealed] == [
        ("continuous", 481.0, 25)]
    assert _rejudged([]) == (True, 481.0, 25, 1, 0)


def test_rejecting_the_first_barks_shortens_the_episode_until_it_is_seven_minutes_or_less(
        ) -> None:
    assert _rejudged([0, 20, 40]) == (True, 421.0, 22, 1, 3)  # 60 s to 481 s: 7:01
    assert _rejudged([0, 20, 40, 60]) == (False, 401.0, 21, 0, 4)  # 80 s to 481 s: 6:41


def test_rejecting_barks_in_the_middle_splits_the_episode_at_a_gap_of_a_minute() -> None:
    # 201 s to 260 s is a gap of 59 s (under 60 s): one episode still
    assert _rejudged([220, 240]) == (True, 481.0, 23, 1, 2)
    # 181 s to 260 s is 79 s: two episodes, 0-181 s and 260-481 s, neither over 7 minutes
    assert _rejudged([200, 220, 240]) == (False, 221.0, 12, 0, 3)


def test_the_intermittent_rule_still_counts_only_plainly_audible_events() -> None:
    # two barks 20 s apart every 5 min for 75 min: a stretch of 4,521 s; the two at 35 min are
    # of unknown audibility and do not count, so rejecting the two at 30 min leaves 25:21 to
    # 40 min (879 s) without a counted event: two stretches, neither over an hour
    events = [bark(t + d, None if t == 2100 else True) for t in range(0, 4501, 300)
              for d in (0, 20)]
    assert _rejudged([], events, "intermittent") == (True, 4521.0, 30, 1, 0)
    assert _rejudged([1800, 1820], events, "intermittent") == (False, 2121.0, 16, 0, 2)
    # rejecting one of the two leaves the other alone: without company it no longer counts
    assert _rejudged([1800], events, "intermittent") == (False, 2121.0, 16, 0, 1)
