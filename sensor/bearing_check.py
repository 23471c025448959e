"""The installation check of a microphone array (issue 36, item 5): the officer claps (or plays
a tone) at a spot whose compass bearing from the sensor is known, and the sensor says which
bearing it measured, so that an array mounted the wrong way round, or with its orientation
entered wrongly, is caught on site (``barkwatch-sensor bearing-check``).

A clap is a short rise of the measurement channel's energy well over the capture's median;
each one's bearing is :func:`sensor.doa.estimate_bearing` over the half second from just
before it (the estimate weights onsets, so the clap's direct sound leads, not the room's
echoes). Without a clap (a steady tone), the whole capture is one stretch. The verdict
compares the circular median of the bearings with the expected one; when they disagree by
more than the tolerance, the orientation that would make them agree is suggested
(``[array] orientation_deg``), since a rotated array shifts every bearing by its rotation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sensor.array import ArraySettings
from sensor.doa import Bearing, DoaOptions, DoaPlan, estimate_bearing, plan_doa

WINDOW_S = 0.01  # energy windows for finding claps
MIN_RISE_DB = 15.0  # a clap's window stands this far over the capture's median window
MIN_GAP_S = 0.5  # claps closer than this are one
BEFORE_S, AFTER_S = 0.05, 0.45  # the stretch around a clap's peak that is estimated
DEFAULT_TOLERANCE_DEG = 15.0
# A clap lasts a frame or two, not the 0.06 s sub-blocks of a bark: one frame a sub-block,
# and every frame holding a hundredth of the stretch's weight counts.
CLAP_OPTIONS = DoaOptions(block_s=0.02, min_block_share=0.01)


@dataclass(frozen=True)
class BearingCheck:
    """What the check measured: each clap's time and bearing, their median, and the verdict."""

    expected_deg: float
    tolerance_deg: float
    claps_s: tuple[float, ...]  # peak times; empty: the whole capture was one stretch
    bearings: tuple[Bearing, ...]
    measured_deg: float | None  # circular median of the bearings found; None: none found
    offset_deg: float | None  # measured - expected, -180..180
    suggested_orientation_deg: float | None  # the orientation that would remove the offset

    @property
    def passed(self) -> bool:
        return self.offset_deg is not None and abs(self.offset_deg) <= self.tolerance_deg


def signed_difference_deg(a: float, b: float) -> float:
    """a - b on the circle, in -180..180."""
    return (a - b + 180.0) % 360.0 - 180.0


def circular_median_deg(angles: list[float]) -> float:
    """The angle of ``angles`` whose summed circular distance to the others is least."""
    values = np.asarray(angles, dtype=np.float64)
    distance = np.abs((values[:, None] - values[None, :] + 180.0) % 360.0 - 180.0)
    return float(values[int(np.argmin(distance.sum(axis=1)))])


def find_claps(channel: np.ndarray, sample_rate: int, min_rise_db: float = MIN_RISE_DB
               ) -> list[int]:
    """Sample indices of the claps in ``channel``: the loudest window of each run of windows
    standing ``min_rise_db`` over the median window, runs closer than MIN_GAP_S merged."""
    size = max(1, round(WINDOW_S * sample_rate))
    count = channel.size // size
    if count < 3:
        return []
    power = np.mean(np.square(channel[: count * size].reshape(count, size)), axis=1)
    floor = max(float(np.median(power)), 1e-20)
    loud = np.flatnonzero(10 * np.log10(np.maximum(power, 1e-30) / floor) >= min_rise_db)
    peaks: list[int] = []
    gap = max(1, round(MIN_GAP_S / WINDOW_S))
    start = 0
    for k in range(1, loud.size + 1):
        if k == loud.size or loud[k] - loud[k - 1] > gap:
            run = loud[start:k]
            if run.size:
                best = int(run[np.argmax(power[run])])
                peaks.append(best * size + int(np.argmax(np.abs(
                    channel[best * size:(best + 1) * size]))))
            start = k
    return peaks


def check_bearing(audio: np.ndarray, sample_rate: int, array: ArraySettings,
                  measurement_channel: int, expected_deg: float,
                  tolerance_deg: float = DEFAULT_TOLERANCE_DEG,
                  plan: DoaPlan | None = None) -> BearingCheck:
    """The check over ``audio`` (samples, channels) as captured from ``array``."""
    if not array.can_bear:
        raise ValueError("the bearing check needs a microphone array ([array] preset)")
    if not (math.isfinite(expected_deg) and 0.0 <= expected_deg <= 360.0):
        raise ValueError(f"the expected bearing must be 0-360 degrees, not {expected_deg}")
    plan = plan or plan_doa(array, sample_rate, CLAP_OPTIONS)
    channel = np.asarray(audio[:, measurement_channel], dtype=np.float64)
    claps = find_claps(channel, sample_rate)
    if claps:
        stretches = [audio[max(0, p - round(BEFORE_S * sample_rate)):
                           p + round(AFTER_S * sample_rate)] for p in claps]
    else:
        stretches = [audio]
    bearings = tuple(estimate_bearing(s, plan) for s in stretches)
    found = [b.bearing_deg for b in bearings if b.bearing_deg is not None]
    if not found:
        return BearingCheck(expected_deg, tolerance_deg, tuple(p / sample_rate for p in claps),
                            bearings, None, None, None)
    measured = circular_median_deg(found)
    offset = signed_difference_deg(measured, expected_deg)
    # compass = orientation -/+ azimuth: every bearing moves with the orientation, one for one
    suggested = (array.orientation_deg - offset) % 360.0
    return BearingCheck(expected_deg, tolerance_deg, tuple(p / sample_rate for p in claps),
                        bearings, measured, offset, suggested)


def describe(check: BearingCheck) -> list[str]:
    """The lines ``barkwatch-sensor bearing-check`` prints."""
    lines = []
    if not check.claps_s:
        lines.append("no clap found: the whole capture taken as one sound (a tone)")
    for k, bearing in enumerate(check.bearings):
        at = f"clap at {check.claps_s[k]:.2f} s" if check.claps_s else "capture"
        if bearing.bearing_deg is None:
            lines.append(f"{at}: no bearing ({bearing.reason})")
        else:
            lines.append(f"{at}: bearing {bearing.bearing_deg:.0f} deg "
                         f"+/- {bearing.uncertainty_deg:.0f}")
    if check.measured_deg is None or check.offset_deg is None:
        lines.append("no bearing measured: clap louder, closer or away from walls, and again")
        return lines
    lines.append(f"measured {check.measured_deg:.0f} deg, expected {check.expected_deg:.0f} deg: "
                 f"off by {check.offset_deg:+.0f} deg (tolerance {check.tolerance_deg:.0f})")
    if check.passed:
        lines.append("the array's orientation is right")
    else:
        lines.append(f"the array is turned or its orientation is wrong: check how it is "
                     f"mounted, or set [array] orientation_deg = "
                     f"{check.suggested_orientation_deg:.0f}")
    return lines
