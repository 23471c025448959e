"""Is the system clock synchronised? Evidence depends on the time base, so every heartbeat says.

Reads the kernel's NTP state with ``adjtimex(2)`` (modes = 0 only reads): the return value
is TIME_ERROR (5) while the clock is not synchronised, whichever NTP daemon disciplines it
(systemd-timesyncd, chrony, ntpd). The estimated error comes from the same call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass

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
