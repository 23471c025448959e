"""The ``sensor_health`` point: what a heartbeat carries is stored, bounded and checked."""

from __future__ import annotations

import pytest

from analyzer.errors import AnalyzerError
from analyzer.store import health_point
from analyzer.store.influx import MAX_HEALTH_TEXT_CHARS


def test_the_broker_connection_state_of_a_heartbeat_is_stored() -> None:
    line = health_point("dev-1", {"time_ns": 5, "broker_state": "refused",
                                  "broker_error": "connection refused", "connect_failures": 3,
                                  "frames": 10}).to_line_protocol()
    assert 'broker_state="refused"' in line and "connect_failures=3i" in line
    assert 'broker_error="connection refused"' in line and line.endswith(" 5")


def test_a_long_text_field_is_cut_to_its_bound() -> None:
    line = health_point("dev-1", {"time_ns": 5, "broker_error": "x" * 10_000}).to_line_protocol()
    assert f'broker_error="{"x" * MAX_HEALTH_TEXT_CHARS}"' in line


def test_a_field_of_the_wrong_type_is_refused_by_name() -> None:
    with pytest.raises(AnalyzerError, match="'connect_failures'"):
        health_point("dev-1", {"time_ns": 5, "connect_failures": "three"})
