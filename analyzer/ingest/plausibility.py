"""Checks a decoded frame against what a Barkwatch sensor can actually send.

:func:`sensor.wire.decode_frame` already checks every field's presence, type, range and array
size. The analyzer trusts no payload beyond that, so before a frame is scored or stored it
also has to be consistent with itself, with the device's earlier frames and with the clock:

- :func:`frame_problem` (drop and count as ``malformed``): the calibration is one a sensor
  can be configured with, every level is one that calibration can measure (see
  :func:`level_problem`), the band levels lie within the IEC 61260-1 bands the schema names
  and below the Nyquist frequency, and the short-time series covers the frame's duration.
- :func:`shape_problem` (drop, ``malformed``): the step size and steps per second equal those
  the detector is built for (50 steps of 0.02 s; never those of a device's first frame, which
  an untrusted frame could set).
- :func:`time_problem` (kept at arrival time, ``implausible_time``): the capture time lies
  within ``max_frame_age_s`` before and ``max_clock_ahead_s`` after the analyzer's clock.

Why an implausible time is stored flagged rather than dropped: a sensor whose clock failed
(a Raspberry Pi has no battery-backed clock; one that boots without network can read 1970 or
last week) still measured real sound, and that record should survive for review. But its time
cannot be trusted, and rules judge by capture time, so the frame is not scored: it yields no
dog events and no ``level`` point. It is kept as an ``implausible_frame`` point at its arrival
time with the claimed time as a field: written at the claimed time, a device's times spread
over centuries made one InfluxDB shard per claimed week and exhausted InfluxDB (issue 32,
item 3; ``analyzer.store.outside_window``). Every ``level`` point still carries
``implausible_time = false``, so queries that filter on it keep working. A
frame can legitimately be old only as long as the sensor's outbox (3 days by default) or the
broker's queue (about 40 sensor-hours) can hold it, hence the 7-day default. Replaying an old
recording through the live path needs a larger ``max_frame_age_s``; ``barkwatch analyze``
needs none.
"""

from __future__ import annotations

import math

import numpy as np

from sensor.wire import GATE_DOG, Frame

FULL_SCALE_DB_RANGE = (60.0, 200.0)  # the sensor's calibration.full_scale_db bounds
LAST_BAND_INDEX = 13  # IEC 61260-1 base-10 band x = 13: 20 kHz, the last the schema names
NS_PER_S = 1_000_000_000
# The sensor floors every mean square at 1e-20 of full scale (sensor.levels.MEAN_SQUARE_FLOOR,
# sensor.features.POWER_FLOOR), so digital silence reads exactly full_scale_db - 200 dB.
SILENCE_BELOW_FULL_SCALE_DB = 200.0
# An RMS of full scale (a full-scale square wave) reads full_scale_db; only a weighting's gain
# lifts a level above it (A: +1.3 dB near 2.5 kHz; full-scale squares and noise measured at
# most +0.7 dB). 10 dB also covers float recordings a little beyond full scale.
HEADROOM_ABOVE_FULL_SCALE_DB = 10.0
LEVEL_ROUNDING_DB = 0.5  # float16 on the wire rounds levels by at most 0.0625 dB
SCALAR_LEVELS = (
    ("la", "laeq_db"), ("lc", "lceq_db"), ("lz", "lzeq_db"), ("lafmax", "lafmax_db"),
    ("lafmin", "lafmin_db"), ("lasmax", "lasmax_db"), ("l10", "laf10_db"),
    ("l50", "laf50_db"), ("l90", "laf90_db"),
)
SENT_IN_DOG_FRAMES_ONLY = frozenset({"lc", "lz"})
ARRAY_LEVELS = (
    ("bands", "bands_db"), ("laeq_s", "laeq_blocks_db"), ("laf_s", "laf_blocks_db"),
)


def band_centre_hz(index: int) -> float:
    """Exact mid-band frequency of IEC 61260-1 base-10 band ``index`` (x), Hz."""
    return 1000.0 * 10.0 ** (index / 10.0)


def measurable_range_db(full_scale_db: float) -> tuple[float, float]:
    """Lowest and highest level (dB) a sensor calibrated to ``full_scale_db`` can report.

    With the calibration bounds of 60..200 dB this is at most -140.5..210 dB: wider than
    sound in air allows (194 dB SPL, a wave whose troughs reach vacuum at 1 atm), so no
    real measurement is refused, yet 3e38 dB or a 180 dB reading from a microphone chain
    that clips at 120 dB is.
    """
    return (
        full_scale_db - SILENCE_BELOW_FULL_SCALE_DB - LEVEL_ROUNDING_DB,
        full_scale_db + HEADROOM_ABOVE_FULL_SCALE_DB,
    )


def level_problem(frame: Frame) -> str | None:
    """The first level of ``frame`` (field, value, index) its calibration cannot measure."""
    low, high = measurable_range_db(frame.full_scale_db)
    reason = (
        f"is outside {low:g}..{high:g} dB, what a full scale of {frame.full_scale_db:g} dB "
        "can measure"
    )
    for key, name in SCALAR_LEVELS:
        value = float(getattr(frame, name))
        if key in SENT_IN_DOG_FRAMES_ONLY and frame.gate != GATE_DOG:
            continue  # NaN: a "levels" or "scores" frame (wire v4) does not carry it
        if not low <= value <= high:  # NaN fails too
            return f"field {key!r}: level {value:g} dB {reason}"
    for key, name in ARRAY_LEVELS:
        values = np.asarray(getattr(frame, name), dtype=np.float64).ravel()
        outside = np.flatnonzero(~((values >= low) & (values <= high)))
        if outside.size:
            first = int(outside[0])
            return (
                f"field {key!r}: level {values[first]:g} dB at index {first} ({outside.size} "
                f"of {values.size} values) {reason}"
            )
    return None


def frame_problem(frame: Frame) -> str | None:
    """What makes ``frame`` impossible for a sensor to have sent, or None."""
    low, high = FULL_SCALE_DB_RANGE
    if not math.isfinite(frame.full_scale_db) or not low <= frame.full_scale_db <= high:
        return f"field 'fs_db': calibration {frame.full_scale_db} dB is outside {low}..{high} dB"
    levels = level_problem(frame)
    if levels:
        return levels
    last_band = frame.band_first_index + len(frame.bands_db) - 1
    if last_band > LAST_BAND_INDEX:
        return (
            f"fields 'b0'/'bands': bands {frame.band_first_index}..{last_band} run past the "
            f"last IEC 61260-1 band index {LAST_BAND_INDEX}"
        )
    if band_centre_hz(last_band) >= frame.sample_rate / 2:
        return (
            f"fields 'b0'/'bands': band {last_band} ({band_centre_hz(last_band):.0f} Hz) is not "
            f"below the Nyquist frequency of {frame.sample_rate} Hz"
        )
    covered_s = len(frame.dog_steps) * frame.hop_s
    if abs(covered_s - frame.duration_s) > frame.hop_s:
        return (
            f"fields 'dog_s'/'hop': {len(frame.dog_steps)} steps of {frame.hop_s} s cover "
            f"{covered_s:.3f} s, but the frame lasts {frame.duration_s:.3f} s"
        )
    return None


def shape_problem(frame: Frame, expected: tuple[int, float]) -> str | None:
    """Whether ``frame``'s (steps per second, step s) differ from the ``expected`` ones (the
    detector's: the CNN's dog score every 20 ms)."""
    per_second = round(len(frame.dog_steps) / frame.duration_s)
    shape = (per_second, float(frame.hop_s))
    if shape[0] != expected[0] or not math.isclose(shape[1], expected[1], rel_tol=1e-9):
        return (
            f"fields 'dog_s'/'hop': {shape[0]} steps per second of {shape[1]} s, but the "
            f"detector takes {expected[0]} of {expected[1]} s"
        )
    return None


def time_problem(
    capture_ns: int, now_ns: int, max_age_s: float, max_ahead_s: float
) -> str | None:
    """Why capture time ``capture_ns`` is implausible at ``now_ns`` (both ns since the epoch,
    UTC), or None when it lies in [now - max_age_s, now + max_ahead_s]."""
    offset_s = (capture_ns - now_ns) / NS_PER_S
    if offset_s > max_ahead_s:
        return f"capture time is {offset_s:.0f} s ahead of the analyzer's clock"
    if -offset_s > max_age_s:
        return f"capture time is {-offset_s / 86400:.1f} days old"
    return None
