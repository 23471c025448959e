"""Is the system clock synchronised? Evidence depends on the time base, so every heartbeat says.

Reads the kernel's NTP state with ``adjtimex(2)`` (modes = 0 only reads): the return value
is TIME_ERROR (5) while the clock is not synchronised, whichever NTP daemon disciplines it
(systemd-timesyncd, chrony, ntpd). The estimated error comes from the same call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

TIME_ERROR = 5


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class _Timex(ctypes.Structure):
    # struct timex from <sys/timex.h> (Linux); the tail is padding for future fields.
    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time", _Timeval),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("padding", ctypes.c_int * 11),
    ]


@dataclass(frozen=True)
class ClockState:
    """Kernel view of the clock: synchronised or not, and the maximum error in microseconds."""

    synchronised: bool | None
    max_error_us: int | None


def clock_state() -> ClockState:
    """Read the kernel's clock discipline state; ``None`` fields when it cannot be read."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return ClockState(None, None)
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        timex = _Timex()
        state = libc.adjtimex(ctypes.byref(timex))
    except (OSError, AttributeError):
        return ClockState(None, None)
    if state < 0:
        return ClockState(None, None)
    return ClockState(state != TIME_ERROR, int(timex.maxerror))


# ntpd slews offsets below 128 ms and steps only above (ntp.conf "tinker step"; chrony's
# makestep is configured in the same range): a jump of 100 ms or more is a step, not a slew
# (a slew moves the clock at most 0.5 ms per second).
CLOCK_STEP_MIN_NS = 100_000_000


class ClockStepDetector:
    """Notices the wall clock stepping (NTP correcting it) between two readings.

    The wall clock is compared with a clock no step moves (CLOCK_MONOTONIC, which NTP only
    slews), so a file replayed faster than real time, or a capture that stalled, reads as no
    step. Capture time never uses the wall clock after the stream's start (it counts
    samples), so a step is only flagged, never applied. Both clocks are passed in for tests.
    """

    def __init__(
        self,
        wall_ns: Callable[[], int] = time.time_ns,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
        min_step_ns: int = CLOCK_STEP_MIN_NS,
    ) -> None:
        self._wall_ns = wall_ns
        self._monotonic_ns = monotonic_ns
        self.min_step_ns = min_step_ns
        self._offset_ns = wall_ns() - monotonic_ns()
        self.steps = 0

    def step_ns(self) -> int:
        """How far the wall clock jumped since the last call (ns, signed); 0 below the minimum."""
        offset = self._wall_ns() - self._monotonic_ns()
        # Compared with the previous reading, not the first: a slew accumulates slowly.
        step, self._offset_ns = offset - self._offset_ns, offset
        if abs(step) < self.min_step_ns:
            return 0
        self.steps += 1
        log.warning("the wall clock stepped by %+.3f s (NTP?); capture time counts samples and "
                    "is unaffected; the frame is flagged", step / 1e9)
        return step
