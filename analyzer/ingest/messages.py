"""The small JSON and text messages beside the frames: heartbeats and status.

Pure: bytes in, a value out or an ``AnalyzerError`` saying what was wrong. Hostile payloads
(deep nesting, huge integers, oversize bodies) are errors like any other.
"""

from __future__ import annotations

import json
from typing import Any

from analyzer.errors import AnalyzerError

# A heartbeat is about 600 bytes (the example in docs/WIRE.md); 16 KiB leaves room for new
# fields while bounding what json.loads is given.
MAX_HEARTBEAT_BYTES = 16 * 1024


def parse_heartbeat(payload: bytes) -> dict[str, Any]:
    """The heartbeat's JSON object; AnalyzerError when it is too large or not one."""
    if len(payload) > MAX_HEARTBEAT_BYTES:
        raise AnalyzerError(
            f"heartbeat of {len(payload)} bytes exceeds the limit of {MAX_HEARTBEAT_BYTES}"
        )
    try:
        heartbeat = json.loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # ValueError: also an integer beyond Python's 4,300-digit conversion limit;
        # RecursionError: arrays or objects nested deeper than the interpreter's stack.
        raise AnalyzerError(f"heartbeat is not JSON: {str(exc)[:200]}") from exc
    if not isinstance(heartbeat, dict):
        raise AnalyzerError("heartbeat is not a JSON object")
    return heartbeat


def parse_status(payload: bytes) -> bool:
    """True for ``online``, False for ``offline`` (the Last Will); AnalyzerError otherwise."""
    text = payload.decode(errors="replace").strip()
    if text not in ("online", "offline"):
        raise AnalyzerError(f"status {text[:40]!r} is neither 'online' nor 'offline'")
    return text == "online"
