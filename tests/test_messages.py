"""Heartbeat and status payloads: a value or an AnalyzerError naming the problem."""

from __future__ import annotations

import pytest

from analyzer.errors import AnalyzerError
from analyzer.ingest.messages import MAX_HEARTBEAT_BYTES, parse_heartbeat, parse_status


def test_a_heartbeat_object_is_returned_as_sent() -> None:
    assert parse_heartbeat(b'{"device_id": "dev-1", "frames": 3}') == {
        "device_id": "dev-1", "frames": 3}


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"[" * 10_000, "not JSON"),  # deeper than the interpreter's stack
        (b'{"n": ' + b"9" * 5_000 + b"}", "not JSON"),  # beyond the 4,300-digit limit
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b" " * (MAX_HEARTBEAT_BYTES + 1), "exceeds the limit"),
    ],
)
def test_a_hostile_heartbeat_is_an_analyzer_error_saying_why(payload: bytes, reason: str) -> None:
    with pytest.raises(AnalyzerError, match=reason):
        parse_heartbeat(payload)


def test_status_is_online_or_offline_and_nothing_else() -> None:
    assert parse_status(b"online") is True and parse_status(b" offline\n") is False
    with pytest.raises(AnalyzerError, match="neither 'online' nor 'offline'"):
        parse_status(b"\xffmaybe")
