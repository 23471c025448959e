"""The durable outbox: survives restarts, never reuses a sequence number, bounded and counted."""

from __future__ import annotations

from pathlib import Path

from sensor.outbox import Outbox


def test_frames_survive_reopening(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite")
    for seq in range(3):
        box.put(seq, f"frame {seq}".encode())
    box.close()
    reopened = Outbox(tmp_path / "o.sqlite")
    assert reopened.peek(10) == [(0, b"frame 0"), (1, b"frame 1"), (2, b"frame 2")]
    assert reopened.next_seq() == 3


def test_sequence_numbers_continue_after_everything_was_acknowledged(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite")
    box.put(0, b"a")
    box.put(1, b"b")
    box.delete([0, 1])
    box.close()
    reopened = Outbox(tmp_path / "o.sqlite")
    assert reopened.backlog() == 0
    assert reopened.next_seq() == 2


def test_peek_after_skips_frames_in_flight(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite")
    for seq in range(5):
        box.put(seq, b"x")
    assert [seq for seq, _ in box.peek(2, after_seq=1)] == [2, 3]


def test_full_outbox_evicts_oldest_and_counts_it(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite", max_frames=3)
    for seq in range(5):
        box.put(seq, b"x")
    assert [seq for seq, _ in box.peek(10)] == [2, 3, 4]
    assert box.evicted == 2
    box.close()
    assert Outbox(tmp_path / "o.sqlite", max_frames=3).evicted == 2
