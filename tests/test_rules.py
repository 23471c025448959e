"""Ordinance rules (Subd. 5): boundaries, audibility, coverage, streaming against brute force."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.ordinance.coverage import Coverage
from analyzer.ordinance.evidence import sensitivity
from analyzer.ordinance.rules import (
    COMPLETED,
    CONTINUOUS,
    INTERMITTENT,
    NS,
    ONGOING,
    Finding,
    RuleEngine,
    RuleEvent,
    RuleInputError,
    RuleSettings,
    counted_events,
    evaluate,
)
from sensor.configfile import build
from sensor.errors import ConfigError

DEV = "dev-1"
MS = 1_000_000


def ev(onset_s: float, offset_s: float, audible: bool | None = True) -> RuleEvent:
    """An event from onset to offset (s), plainly audible or not (None: not assessed)."""
    return RuleEvent(DEV, round(onset_s * NS), round(offset_s * NS), "dog", 0.9, 70.0, 80.0,
                     "test-model", plainly_audible=audible,
                     audibility_margin_db=None if audible is None else 12.0 if audible else -3.0,
                     level_at_100ft_db=None if audible is None else 50.0,
                     uncertainty_db=None if audible is None else 3.2,
                     audibility_score=None if audible is None else 0.8)


def barks(first_s: float, last_end_s: float, every_s: float, length_s: float = 1.0,
          audible: bool | None = True) -> list[RuleEvent]:
    """Barks of ``length_s`` every ``every_s``; the last one ends exactly at ``last_end_s``."""
    out, end = [], last_end_s
    while end - length_s >= first_s - 1e-9:
        out.append(ev(end - length_s, end, audible))
        end -= every_s
    return sorted(out, key=lambda e: e.key)


# The rules' timing is checked on single barks minutes apart, each counting alone; what the
# default company (an intermittent event counts only near another, issue 39) changes is
# checked on its own below.
ALONE = RuleSettings(intermittent_company_s=0.0)


def run(events: list[RuleEvent], rule_settings: RuleSettings = ALONE,
        coverage: list[tuple[int, int]] | None = None) -> list[Finding]:
    span = [(0, 10**15)] if coverage is None else coverage
    return evaluate(DEV, events, span, rule_settings)


def rules_of(findings: list[Finding], rule: str) -> list[Finding]:
    return [f for f in findings if f.rule == rule]


# --- continuous: 7 minutes, "more than" --------------------------------------------------------

def test_an_episode_of_exactly_seven_minutes_is_not_a_violation() -> None:
    assert rules_of(run(barks(0.0, 420.0, 30.0)), CONTINUOUS) == []


def test_an_episode_of_seven_minutes_and_a_tenth_is_a_violation() -> None:
    events = [ev(0.0, 1.0)] + barks(30.1, 420.1, 30.0)
    (finding,) = rules_of(run(events), CONTINUOUS)
    assert (finding.start_ns, finding.end_ns) == (0, 420_100_000_000)
    assert finding.duration_s == pytest.approx(420.1)
    assert finding.status == COMPLETED


def test_a_gap_of_exactly_the_continuity_gap_breaks_the_episode() -> None:
    # Barks 1 s long, 8 of them over 428 s; "under 60 s" continues, exactly 60 s does not.
    apart = [RuleEvent(DEV, i * 61 * NS, (i * 61 + 1) * NS, "dog", 0.9, 70.0, 80.0, "m", True)
             for i in range(8)]
    gaps = [e2.onset_ns - e1.offset_ns for e1, e2 in zip(apart, apart[1:], strict=False)]
    assert gaps == [60 * NS] * 7
    assert rules_of(run(apart), CONTINUOUS) == []
    together = [RuleEvent(DEV, e.onset_ns - i, e.offset_ns - i, "dog", 0.9, 70.0, 80.0, "m",
                          True) for i, e in enumerate(apart)]  # gaps of 60 s less 1 ns
    assert len(rules_of(run(together), CONTINUOUS)) == 1


def test_overlapping_and_contained_events_extend_from_the_latest_end() -> None:
    events = [ev(0.0, 300.0), ev(10.0, 20.0), ev(330.0, 400.0), ev(440.0, 450.0)]
    (finding,) = rules_of(run(events), CONTINUOUS)
    assert finding.end_ns == 450 * NS and len(finding.counted) == 4


# --- intermittent: one hour, plainly audible 100 ft -------------------------------------------

def test_a_stretch_of_exactly_one_hour_is_not_a_violation() -> None:
    assert rules_of(run(barks(0.0, 3600.0, 300.0)), INTERMITTENT) == []


def test_a_stretch_of_one_hour_and_a_tenth_is_a_violation() -> None:
    (finding,) = rules_of(run([ev(0.0, 1.0)] + barks(300.1, 3600.1, 300.0)), INTERMITTENT)
    assert finding.end_ns == 3_600_100_000_000
    assert finding.settings.reading(INTERMITTENT).startswith("intermittent: only")


def test_inaudible_events_do_not_carry_an_intermittent_stretch() -> None:
    audible = barks(0.0, 4201.0, 720.0)  # audible barks 12 min apart: gaps over 10 min
    quiet = barks(360.0, 3961.0, 720.0, audible=False)  # inaudible ones in between
    unknown = barks(200.0, 4001.0, 720.0, audible=None)
    found = run(audible + quiet + unknown)
    assert rules_of(found, INTERMITTENT) == []
    assert rules_of(found, CONTINUOUS) == []  # not continuous either: gaps of about 2 minutes


def test_a_stretch_counts_audible_events_and_keeps_inaudible_ones_in_its_span() -> None:
    audible = barks(0.0, 4201.0, 540.0)
    quiet = barks(270.0, 3781.0, 540.0, audible=False)
    (finding,) = rules_of(run(audible + quiet), INTERMITTENT)
    assert len(finding.counted) == len(audible)
    assert len(finding.events) == len(audible) + len(quiet)


def test_audibility_binds_the_continuous_rule_only_when_configured() -> None:
    loud_but_inaudible = barks(0.0, 600.0, 20.0, audible=False)
    assert len(rules_of(run(loud_but_inaudible), CONTINUOUS)) == 1
    binding = RuleSettings(audibility_binds_continuous=True)
    assert rules_of(run(loud_but_inaudible, binding), CONTINUOUS) == []
    assert "binding both rules" in binding.reading(CONTINUOUS)
    assert "intermittent barking only" in RuleSettings().reading(CONTINUOUS)


# --- intermittent barking is barks in company (issue 39) --------------------------------------

def test_single_sounds_minutes_apart_do_not_carry_a_stretch_by_default() -> None:
    # One bark every 5 minutes for 70 minutes: a stretch when each counts alone, none when an
    # event needs another within 60 s (a gull or a rooster taken for a dog, once per gap).
    lonely = barks(0.0, 4201.0, 300.0)
    assert len(rules_of(run(lonely), INTERMITTENT)) == 1
    assert rules_of(run(lonely, RuleSettings()), INTERMITTENT) == []
    assert RuleSettings().intermittent_company_s == 60.0
    assert "only in company" in RuleSettings().reading(INTERMITTENT)
    assert "company" not in ALONE.reading(INTERMITTENT)


def test_bouts_carry_the_stretch_and_a_lone_sound_does_not_bridge_a_gap() -> None:
    # Bouts of three barks 20 s apart every 9 minutes for 70 minutes: a violation.
    bouts = [e for start in range(0, 4200, 540) for e in barks(start, start + 41.0, 20.0)]
    (finding,) = rules_of(run(bouts, RuleSettings()), INTERMITTENT)
    assert len(finding.counted) == len(bouts) and finding.end_ns == (3780 + 41) * NS
    # Bouts 12 minutes apart (gaps over 10 min) with one lone sound in the middle of each gap:
    # counted alone it bridges every gap; in company it bridges none.
    apart = [e for start in range(0, 5000, 720) for e in barks(start, start + 41.0, 20.0)]
    lone = [ev(start + 380.0, start + 381.0) for start in range(0, 4300, 720)]
    assert len(rules_of(run(apart + lone), INTERMITTENT)) == 1
    assert rules_of(run(apart + lone, RuleSettings()), INTERMITTENT) == []


def test_company_is_under_the_limit_end_to_start_and_a_long_event_is_its_own_company() -> None:
    rs = RuleSettings()
    pair = [ev(0.0, 1.0), ev(60.999, 62.0)]  # 59.999 s from end to start: each counts
    assert counted_events(INTERMITTENT, rs, pair) == pair
    assert counted_events(INTERMITTENT, rs, [ev(0.0, 1.0), ev(61.0, 62.0)]) == []  # 60 s
    inside = [ev(0.0, 100.0), ev(10.0, 11.0)]  # overlapping: company
    assert counted_events(INTERMITTENT, rs, inside) == inside
    inaudible_neighbour = [ev(0.0, 1.0), ev(10.0, 11.0, audible=False)]
    assert counted_events(INTERMITTENT, rs, inaudible_neighbour) == []
    assert counted_events(INTERMITTENT, rs, [ev(0.0, 60.0)]) == [ev(0.0, 60.0)]
    assert counted_events(INTERMITTENT, rs, [ev(0.0, 59.9)]) == []
    assert counted_events(CONTINUOUS, rs, [ev(0.0, 1.0)]) == [ev(0.0, 1.0)]  # intermittent only


def test_company_longer_than_the_intermittency_gap_is_refused() -> None:
    with pytest.raises(ConfigError, match="intermittent_company_s"):
        build(RuleSettings, {"intermittency_gap_s": 300.0, "intermittent_company_s": 301.0})
    assert build(RuleSettings, {"intermittent_company_s": 0}).intermittent_company_s == 0.0


def test_the_live_engine_waits_for_company_before_it_decides() -> None:
    # A lone bark at 100 s whose company (150 s) arrives after the settled frontier passed
    # 100 s, within the reorder window: the engine holds the first bark until 101 + 60 s is
    # settled, so it counts and the stretch starts there.
    engine = RuleEngine(DEV, RuleSettings(reorder_window_s=10.0, intermittent_limit_s=600.0))
    engine.observe_coverage(0, 2000 * NS)
    engine.add_event(ev(100.0, 101.0))
    assert engine.advance(130 * NS) == []  # frontier 120 s
    for onset in range(150, 800, 40):
        engine.add_event(ev(onset, onset + 1.0))
        engine.advance((onset + 5) * NS)
    assert engine.late_events == 0
    (finding,) = [f for f in engine.flush() if f.rule == INTERMITTENT]
    assert finding.start_ns == 100 * NS and len(finding.counted) == 18


# --- coverage --------------------------------------------------------------------------------

def test_an_outage_longer_than_the_continuity_gap_ends_the_episode() -> None:
    events = barks(0.0, 241.0, 20.0) + barks(340.0, 600.0, 20.0)  # no frames 241-340 s
    coverage = [(0, 241 * NS), (340 * NS, 700 * NS)]
    assert rules_of(run(events, coverage=coverage), CONTINUOUS) == []


def test_an_outage_inside_a_stretch_is_reported_with_its_length() -> None:
    events = barks(0.0, 1801.0, 240.0) + barks(2280.0, 4000.0, 240.0)
    coverage = [(0, 1900 * NS), (2200 * NS, 5000 * NS)]
    (finding,) = rules_of(run(events, coverage=coverage), INTERMITTENT)
    assert finding.coverage_gaps == ((1900 * NS, 2200 * NS),)


def test_missing_data_right_after_a_finding_is_reported() -> None:
    events = barks(0.0, 500.0, 20.0)
    (finding,) = rules_of(run(events, coverage=[(0, 520 * NS)]), CONTINUOUS)
    assert finding.uncovered_after_end_ns == 40 * NS  # 520-560 s: no frames


def test_coverage_merges_touching_intervals_and_reports_holes() -> None:
    cov = Coverage()
    for start in (0, 1, 2, 5, 3):
        cov.add(start * NS, (start + 1) * NS)
    assert cov.intervals() == [(0, 4 * NS), (5 * NS, 6 * NS)]
    assert cov.gaps(0, 8 * NS) == [(4 * NS, 5 * NS), (6 * NS, 8 * NS)]
    with pytest.raises(Exception, match="ends"):
        cov.add(5, 4)


# --- streaming: raised while ongoing, completed when the gap has passed -----------------------

def test_a_finding_is_raised_when_the_threshold_is_crossed_and_completed_after_the_gap() -> None:
    engine = RuleEngine(DEV, RuleSettings(reorder_window_s=0.0))
    updates: list[tuple[int, Finding]] = []
    for e in barks(0.0, 600.0, 20.0):
        engine.observe_coverage(e.onset_ns - 19 * NS, e.offset_ns)
        engine.add_event(e)
        updates += [(e.offset_ns, f) for f in engine.advance(e.offset_ns)]
    (t_raised, raised), = updates
    assert raised.status == ONGOING and raised.rule == CONTINUOUS
    assert t_raised == 440 * NS  # first bark at 19-20 s: the bark ending at 440 s crosses 7 min
    assert raised.threshold_crossed_ns == 439 * NS
    assert engine.progress(600 * NS).episode_s == pytest.approx(581.0)
    assert engine.advance(659 * NS) == []
    (done,) = engine.advance(660 * NS)  # no event within 60 s of the last one's end
    assert done.status == COMPLETED and done.end_ns == 600 * NS
    assert engine.progress(660 * NS).episode_s == 0.0


def test_late_events_are_counted_and_dropped_and_duplicates_are_harmless() -> None:
    engine = RuleEngine(DEV, RuleSettings(reorder_window_s=10.0))
    engine.add_event(ev(100.0, 101.0))
    engine.add_event(ev(100.0, 101.0))
    engine.advance(115 * NS)  # settles onsets before 105 s
    engine.add_event(ev(100.0, 101.0))  # duplicate of a settled event
    engine.add_event(ev(102.0, 103.0))  # older than the settled frontier: late
    engine.add_event(ev(106.0, 107.0))  # within the window: fine
    assert (engine.duplicates, engine.late_events) == (2, 1)
    assert engine.progress(115 * NS).late_events == 1


def test_events_of_another_device_or_reversed_in_time_are_refused() -> None:
    with pytest.raises(RuleInputError, match="before it starts"):
        ev(10.0, 9.0)
    with pytest.raises(RuleInputError, match="another|device"):
        RuleEngine("other").add_event(ev(1.0, 2.0))


def test_settings_are_bounded_and_described() -> None:
    with pytest.raises(ConfigError, match="continuity_gap_s"):
        build(RuleSettings, {"continuity_gap_s": 0.0})
    with pytest.raises(ConfigError, match="unknown"):
        build(RuleSettings, {"gap": 1.0})
    assert build(RuleSettings, {"intermittency_gap_s": 900}).intermittency_gap_s == 900.0


def test_sensitivity_reports_which_alternative_gaps_keep_the_finding() -> None:
    (finding,) = rules_of(run(barks(0.0, 500.0, 46.0)), CONTINUOUS)  # gaps of 45 s
    rows = {row["gap_s"]: row["holds"] for row in sensitivity(finding)}
    assert rows == {30.0: False, 60.0: True, 120.0: True}


# --- streaming engine against a brute-force reference ------------------------------------------

def brute_force(events: list[RuleEvent], rs: RuleSettings) -> set[tuple[str, int, int, int, int]]:
    """Straight from the definitions: sort, group by gap, keep groups over the limit."""
    unique = sorted({e.key: e for e in events}.values(), key=lambda e: e.key)
    out = set()
    for rule in (CONTINUOUS, INTERMITTENT):
        base = [e for e in unique if rs.counts(rule, e)]
        w = round(rs.intermittent_company_s * NS) if rule == INTERMITTENT else 0
        # in company: another counted event less than w from it (either order, overlap
        # included), or lasting w itself; every pair looked at
        counted = [e for e in base if not w or e.offset_ns - e.onset_ns >= w or any(
            f is not e and max(e.onset_ns, f.onset_ns) - min(e.offset_ns, f.offset_ns) < w
            for f in base)]
        groups: list[list[RuleEvent]] = []
        end = 0
        for e in counted:
            if groups and e.onset_ns - end < rs.gap_ns(rule):
                groups[-1].append(e)
                end = max(end, e.offset_ns)
            else:
                groups.append([e])
                end = e.offset_ns
        for g in groups:
            start, stop = g[0].onset_ns, max(e.offset_ns for e in g)
            if stop - start > rs.limit_ns(rule):
                in_span = [e for e in unique if start <= e.onset_ns <= stop]
                out.add((rule, start, stop, len(g), len(in_span)))
    return out


# Events as steps between onsets on a coarse grid (5 s; lengths on 2.5 s; sometimes 1 ms off),
# so that gaps of exactly the continuity or intermittency gap and exact limits are common.
event_strategy = st.tuples(
    st.sampled_from([0, 5, 5, 10, 10, 15, 15, 20, 25, 25, 30, 60, 120, 125, 300]),
    st.sampled_from([0, 0, 0, 1, 999]), st.integers(0, 8),
    st.sampled_from([True, True, True, False, None]))


def events_from_steps(raw: list[tuple[int, int, int, bool | None]]) -> list[RuleEvent]:
    """Distinct events (one per key: real duplicates are exact copies, added separately)."""
    events: dict[tuple[int, int, str], RuleEvent] = {}
    onset_s = 0
    for step_s, ms, length, audible in raw:
        onset_s += step_s
        onset = onset_s * NS + ms * MS
        event = RuleEvent(DEV, onset, onset + length * 2500 * MS, "dog", 0.5, 60.0, 70.0, "m",
                          audible)
        events.setdefault(event.key, event)
    return list(events.values())


@settings(max_examples=200, deadline=None)
@given(raw=st.integers(0, 150).flatmap(
           lambda n: st.lists(event_strategy, min_size=n, max_size=n)),
       jitter=st.lists(st.integers(0, 30_000)),
       dup=st.lists(st.integers(0, 119), max_size=10), binds=st.booleans(),
       company=st.sampled_from([0.0, 5.0, 10.0, 60.0, 120.0]))
def test_streaming_in_any_order_within_the_window_equals_brute_force(
        raw: list[tuple[int, int, int, bool | None]], jitter: list[int], dup: list[int],
        binds: bool, company: float) -> None:
    rs = RuleSettings(continuous_limit_s=60.0, continuity_gap_s=20.0,
                      intermittent_limit_s=600.0, intermittency_gap_s=120.0,
                      intermittent_company_s=company,
                      audibility_binds_continuous=binds, reorder_window_s=30.0)
    events = events_from_steps(raw)
    events += [events[i] for i in dup if i < len(events)]
    # Arrival order: by onset plus a delay under the reorder window (30 s).
    delays = [jitter[i % len(jitter)] * MS if jitter else 0 for i in range(len(events))]
    arrivals = sorted(zip(events, delays, strict=True), key=lambda p: p[0].onset_ns + p[1])
    engine = RuleEngine(DEV, rs)
    engine.observe_coverage(0, 10**13)
    updates: list[Finding] = []
    now = 0
    for e, _ in arrivals:
        engine.add_event(e)
        now = max(now, e.onset_ns)
        updates += engine.advance(now)
    updates += engine.flush()
    raised = {(f.rule, f.start_ns) for f in updates if f.status == ONGOING}
    completed = {(f.rule, f.start_ns, f.end_ns, len(f.counted), len(f.events))
                 for f in updates if f.status == COMPLETED}
    closes = [f.close_ns for f in updates if f.status == COMPLETED]
    assert closes == sorted(closes)  # completed in evidence-chain order
    assert engine.late_events == 0
    assert completed == brute_force(events, rs)
    assert {(r, s) for r, s, *_ in completed} == raised
