"""Whose dog: events held against the premises' sector (analyzer/acoustics/attribution.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from analyzer.acoustics.attribution import (
    ASSUMED_UNCERTAINTY_DEG,
    ELSEWHERE,
    NO_BEARING,
    PREMISES,
    PremisesSector,
    angle_offset_deg,
    attribute,
    classify_bearing,
    count_origins,
    event_bearing,
)
from sensor.configfile import build
from sensor.errors import ConfigError

EAST = PremisesSector(bearing_deg=90.0, half_width_deg=20.0, distance_m=30.0)
NORTH = PremisesSector.from_corners(350.0, 10.0, 25.0)  # spans north: 350-10 degrees


@dataclass(frozen=True)
class Event:
    bearing_deg: float | None
    bearing_uncertainty_deg: float | None


@pytest.mark.parametrize(("bearing", "uncertainty", "origin"), [
    (90.0, 5.0, PREMISES),
    (104.0, 5.0, PREMISES),  # 14 + 5 < 20: the whole interval inside
    (106.0, 5.0, NO_BEARING),  # 106 +- 5 straddles the edge at 110
    (115.0, 5.0, ELSEWHERE),  # 110 to 120: from the edge outwards
    (270.0, 5.0, ELSEWHERE),
    (90.0, 20.0, NO_BEARING),  # as wide as the sector: not wholly inside
    (None, None, NO_BEARING),
    (None, 3.0, NO_BEARING),
])
def test_an_event_counts_from_the_premises_only_when_its_whole_interval_is_inside(
        bearing, uncertainty, origin):
    assert classify_bearing(EAST, bearing, uncertainty) == origin


def test_an_interval_ending_exactly_on_the_edge_is_not_wholly_inside():
    assert classify_bearing(EAST, 105.0, 5.0) == NO_BEARING


def test_a_sector_across_north_from_its_corners():
    assert NORTH.bearing_deg == 0.0 and NORTH.half_width_deg == 10.0
    assert NORTH.edges_deg == (350.0, 10.0)
    assert PremisesSector.from_corners(10.0, 350.0).bearing_deg == 0.0


@pytest.mark.parametrize(("bearing", "uncertainty", "origin"), [
    (355.0, 2.0, PREMISES),
    (5.0, 2.0, PREMISES),
    (0.0, 9.0, PREMISES),
    (359.9, 0.5, PREMISES),
    (9.0, 2.0, NO_BEARING),
    (345.0, 6.0, NO_BEARING),
    (20.0, 2.0, ELSEWHERE),
    (340.0, 2.0, ELSEWHERE),
    (180.0, 30.0, ELSEWHERE),
])
def test_wrap_around_north(bearing, uncertainty, origin):
    assert classify_bearing(NORTH, bearing, uncertainty) == origin


def test_an_interval_that_comes_round_to_the_other_edge_is_not_elsewhere():
    """180 +- 175 starts outside the sector at 0 +- 10 on one side and reaches it on the
    other: it does not lie wholly outside."""
    assert classify_bearing(NORTH, 180.0, 175.0) == NO_BEARING
    assert classify_bearing(NORTH, 180.0, 165.0) == ELSEWHERE


def test_an_uncertainty_of_half_the_circle_or_more_tells_nothing():
    assert classify_bearing(EAST, 90.0, 180.0) == NO_BEARING
    assert classify_bearing(EAST, 90.0, float("inf")) == NO_BEARING
    assert classify_bearing(EAST, 90.0, -1.0) == NO_BEARING


def test_a_sector_of_every_direction_takes_every_bearing():
    everywhere = PremisesSector(0.0, 180.0, 10.0)
    assert classify_bearing(everywhere, 180.0, 10.0) == PREMISES
    assert classify_bearing(everywhere, None, None) == NO_BEARING


def test_a_sector_not_entered_attributes_nothing():
    assert classify_bearing(PremisesSector(), 0.0, 1.0) == NO_BEARING


def test_a_bearing_without_uncertainty_gets_the_assumed_one():
    edge = EAST.bearing_deg + EAST.half_width_deg
    assert classify_bearing(EAST, edge - ASSUMED_UNCERTAINTY_DEG - 1.0) == PREMISES
    assert classify_bearing(EAST, edge - ASSUMED_UNCERTAINTY_DEG + 1.0) == NO_BEARING


def test_attribute_and_count_keep_the_events_order():
    events = [Event(90.0, 2.0), Event(None, None), Event(200.0, 5.0), Event(108.0, 4.0)]
    origins = attribute(EAST, events)
    assert origins == [PREMISES, NO_BEARING, ELSEWHERE, NO_BEARING]
    assert count_origins(origins) == {PREMISES: 1, ELSEWHERE: 1, NO_BEARING: 2}
    assert count_origins([]) == {PREMISES: 0, ELSEWHERE: 0, NO_BEARING: 0}


def test_the_sector_from_the_premises_width_and_distance():
    sector = PremisesSector.from_width(45.0, width_m=20.0, distance_m=10.0)
    assert sector.half_width_deg == pytest.approx(45.0)
    with pytest.raises(ConfigError, match="positive"):
        PremisesSector.from_width(45.0, width_m=0.0, distance_m=10.0)


def test_angle_offset_is_signed_and_wraps():
    assert angle_offset_deg(10.0, 350.0) == 20.0
    assert angle_offset_deg(350.0, 10.0) == -20.0
    assert angle_offset_deg(180.0, 0.0) == -180.0


def test_the_sector_builds_as_an_installation_record_table():
    sector = build(PremisesSector, {"bearing_deg": 360, "half_width_deg": 12.5,
                                    "distance_m": 40}, "sector.")
    assert sector == PremisesSector(0.0, 12.5, 40.0)


@pytest.mark.parametrize(("table", "message"), [
    ({"half_width_deg": 200.0}, "above the maximum"),
    ({"bearing_deg": -1.0}, "below the minimum"),
    ({"bearing_deg": float("nan")}, "not a finite number"),
    ({"distance_m": "far"}, "expected float"),
    ({"width_deg": 3}, "unknown"),
])
def test_a_bad_sector_is_refused_with_the_key(table, message):
    with pytest.raises(ConfigError, match=message):
        build(PremisesSector, table, "sector.")


def test_a_bad_sector_made_in_code_is_refused():
    with pytest.raises(ConfigError, match="sector.half_width_deg"):
        PremisesSector(0.0, 190.0)
    with pytest.raises(ConfigError, match="sector.bearing_deg"):
        PremisesSector(float("nan"), 10.0)


def test_an_events_bearing_is_the_circular_mean_of_its_stretches():
    bearing, uncertainty = event_bearing([(358.0, 3.0), (2.0, 3.0), (None, None)])
    assert abs(angle_offset_deg(bearing, 0.0)) < 1e-9
    assert uncertainty == pytest.approx(3.0)  # the median: the two agree within it


def test_stretches_that_disagree_widen_the_events_uncertainty():
    bearing, uncertainty = event_bearing([(80.0, 2.0), (100.0, 2.0)])
    assert bearing == pytest.approx(90.0)
    assert 9.0 < uncertainty < 11.0  # their circular spread, about 10 degrees


def test_an_event_without_any_stretch_bearing_has_none():
    assert event_bearing([(None, None), (None, 4.0)]) == (None, None)
    assert event_bearing([]) == (None, None)
    assert event_bearing([(0.0, 2.0), (180.0, 2.0)]) == (None, None)
    assert event_bearing([(10.0, None)]) == (10.0, ASSUMED_UNCERTAINTY_DEG)
