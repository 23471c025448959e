"""Decode and validate one frame payload: a Frame the device could have sent, or a Rejection.

This is the whole of what the live analyzer does with an untrusted frame payload before any
state is touched (``Analyzer._decode_frame`` calls it and counts the outcome), and what
``benchmarks/fuzz_payloads.py`` and ``tests/test_fuzz_payloads.py`` feed hostile payloads to.
Any byte string gives a Frame or a Rejection; another exception is a bug.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.ingest.plausibility import frame_problem, shape_problem
from sensor.errors import WireError, WireReason
from sensor.wire import Frame, decode_frame

DEVICE_MISMATCH = "device_mismatch"  # the frame's device id is not its topic's
IMPLAUSIBLE = "implausible"  # well-formed, but not what a sensor can send (plausibility.py)
# Every reason a rejection can carry: the wire's own codes, then the analyzer's.
REJECTION_REASONS = tuple(str(reason) for reason in WireReason) + (DEVICE_MISMATCH, IMPLAUSIBLE)


@dataclass(frozen=True)
class Rejection:
    """Why a payload was refused: ``reason`` (one of REJECTION_REASONS) for counting,
    ``message`` (naming the field and the fault) for the log."""

    reason: str
    message: str
    seq: int | None = None  # the frame's number when it decoded (the analyzer is done with it)


def check_frame(device: str, payload: bytes, max_payload_bytes: int,
                shape: tuple[int, float]) -> Frame | Rejection:
    """The frame in ``payload`` from the topic of ``device``, if it is one that device could
    have sent; otherwise a Rejection. ``shape``: (mel bands, step in s) the detector needs."""
    try:
        frame = decode_frame(payload, max_bytes=max_payload_bytes)
    except WireError as exc:
        return Rejection(str(exc.reason), str(exc))
    if frame.device_id != device:
        return Rejection(
            DEVICE_MISMATCH,
            f"device id {frame.device_id!r} disagrees with its topic's {device!r}",
        )
    problem = frame_problem(frame) or shape_problem(frame, shape)
    if problem:
        return Rejection(IMPLAUSIBLE, f"frame {frame.seq}: {problem}", frame.seq)
    return frame
