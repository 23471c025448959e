"""End-to-end confirmations: the analyzer says which frames it has stored; only then does the
sensor delete them from its outbox.

A broker's PUBACK only says the broker has a frame. Mosquitto may still drop it: when one
client's flood passes the queue limit of the analyzer's session (``max_queued_messages``,
``max_queued_bytes``), it drops queued messages of every device, among them frames it had
acknowledged to their sensors (issue 32, item 1). So by default (``outbox.confirm =
"analyzer"``) a frame stays in the outbox until the analyzer, after storing it, publishes its
sequence number on ``barkwatch/cmd/v1/<device>/stored`` (inside the command tree, which only
the analyzer may write and only that device may read: broker_config/barkwatch.acl). A frame
the broker acknowledged but the analyzer has not confirmed within ``confirm_timeout_s`` is
sent again, each further time after twice as long, at most ``confirm_resend_max_s``; the
analyzer drops duplicates on (device, seq) and confirms them again. At most
``max_unconfirmed`` frames are out at once, which bounds what one sensor puts in flight.

Payload (JSON): ``{"v": 1, "seqs": [[first, last], ...]}``, inclusive ranges of sequence
numbers, at most ``MAX_RANGES`` of them and ``MAX_CONFIRM_BYTES`` in all.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from sensor.wire import DEVICE_ID_PATTERN

CONFIRM_VERSION = 1
MAX_RANGES = 1000
MAX_CONFIRM_BYTES = 64 * 1024
COMMAND_ROOT = "barkwatch/cmd/v1"


def stored_topic(device_id: str) -> str:
    """Where the analyzer confirms ``device_id``'s stored frames."""
    if not DEVICE_ID_PATTERN.match(device_id):
        raise ValueError(f"not a valid device id: {device_id[:80]!r}")
    return f"{COMMAND_ROOT}/{device_id}/stored"


def seq_ranges(seqs: Iterable[int]) -> list[list[int]]:
    """Sorted, merged inclusive ranges of ``seqs``."""
    ranges: list[list[int]] = []
    for seq in sorted(set(seqs)):
        if ranges and seq == ranges[-1][1] + 1:
            ranges[-1][1] = seq
        else:
            ranges.append([seq, seq])
    return ranges


def encode_stored(seqs: Iterable[int]) -> list[bytes]:
    """The confirmation messages for ``seqs`` (several when there are many ranges)."""
    ranges = seq_ranges(seqs)
    return [json.dumps({"v": CONFIRM_VERSION, "seqs": ranges[i:i + MAX_RANGES]},
                       separators=(",", ":")).encode()
            for i in range(0, len(ranges), MAX_RANGES)]


def decode_stored(payload: bytes) -> list[tuple[int, int]]:
    """The inclusive ranges a confirmation names; ValueError (saying why) for anything else."""
    if len(payload) > MAX_CONFIRM_BYTES:
        raise ValueError(f"confirmation of {len(payload)} bytes exceeds {MAX_CONFIRM_BYTES}")
    try:
        message = json.loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"confirmation is not JSON: {str(exc)[:100]}") from exc
    if not isinstance(message, dict) or message.get("v") != CONFIRM_VERSION:
        raise ValueError(f"confirmation is not a version {CONFIRM_VERSION} object")
    ranges = message.get("seqs")
    if not isinstance(ranges, list) or len(ranges) > MAX_RANGES:
        raise ValueError("confirmation field 'seqs' is not a list of at most "
                         f"{MAX_RANGES} ranges")
    found = []
    for item in ranges:
        if not (isinstance(item, list) and len(item) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**63
                        for n in item) and item[0] <= item[1]):
            raise ValueError(f"confirmation range {str(item)[:60]} is not [first, last]")
        found.append((item[0], item[1]))
    return found


class Unconfirmed:
    """Frames the broker acknowledged and the analyzer has not confirmed: seq -> (when it is
    due again, attempts). Owned by the publisher's thread."""

    def __init__(self, timeout_s: float, max_s: float) -> None:
        self.timeout_s = timeout_s
        self.max_s = max_s
        self._due: dict[int, tuple[float, int]] = {}

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, seq: int) -> bool:
        return seq in self._due

    def sent(self, seq: int, now_s: float, attempt: int = 1) -> None:
        """``seq`` reached the broker at ``now_s`` for the ``attempt``-th time."""
        wait_s = min(self.timeout_s * 2 ** (attempt - 1), self.max_s)
        self._due[seq] = (now_s + wait_s, attempt)

    def confirm(self, ranges: Iterable[tuple[int, int]]) -> list[int]:
        """Forget the frames in ``ranges``; the ones that were waiting."""
        done = []
        for first, last in ranges:
            if last - first < len(self._due):
                done += [s for s in range(first, last + 1) if s in self._due]
            else:
                done += [s for s in self._due if first <= s <= last]
        for seq in done:
            del self._due[seq]
        return done

    def due(self, now_s: float, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` (seq, attempts so far) whose confirmation is overdue at ``now_s``,
        oldest first; they are forgotten here until :meth:`sent` again."""
        overdue = sorted((seq, attempt) for seq, (due_s, attempt) in self._due.items()
                         if due_s <= now_s)[:limit]
        for seq, _ in overdue:
            del self._due[seq]
        return overdue

    def highest(self) -> int:
        """The highest waiting seq, -1 when none."""
        return max(self._due, default=-1)
