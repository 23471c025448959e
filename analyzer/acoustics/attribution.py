"""Whose dog: each event's bearing held against the premises' sector (issue 36, item 4).

The premises as seen from the sensor is a sector: the compass bearing of its centre, its
half-width (half the angle it subtends at the sensor) and its distance. Each event is
classified as

- ``"premises"`` when its whole bearing interval, bearing +- uncertainty, lies inside the
  sector;
- ``"elsewhere"`` when its whole interval lies outside it;
- ``"no bearing"`` when it has none (one capsule, a diffuse field, too short) or when its
  interval straddles the sector's edge.

The straddling case is decided in the owner's favour: an event counts as from the premises
only when every direction its uncertainty allows is inside the sector, so the count over the
sector is a lower bound and the count over all events an upper bound; the analyzer shows
both and the officer and the court decide. Nor is a straddling event claimed as from
elsewhere: what the array cannot tell is reported as not told. Boundaries are strict: an
interval whose end lies exactly on an edge is not wholly inside.

Angles are compass bearings, degrees clockwise from north; a sector may span north
(350-10 degrees). Pure: dataclasses and arithmetic, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from analyzer.detect.events import DogEvent
from sensor.configfile import setting
from sensor.errors import ConfigError

PREMISES = "premises"
ELSEWHERE = "elsewhere"
NO_BEARING = "no bearing"
ORIGINS = (PREMISES, ELSEWHERE, NO_BEARING)

# An event that carries a bearing but no uncertainty is given this much: about the largest
# median error benchmarks/bearing_sim.py measured at 0-10 dB SNR (10.3 degrees, the 4-mic
# board; docs/BEARING.md).
ASSUMED_UNCERTAINTY_DEG = 10.0


def angle_offset_deg(bearing_deg: float, reference_deg: float) -> float:
    """The signed angle from ``reference_deg`` to ``bearing_deg``, in [-180, 180)."""
    return (bearing_deg - reference_deg + 180.0) % 360.0 - 180.0


def _finite(value: float, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"config key {key!r}: {value!r} is not a finite number")
    return float(value)


@dataclass(frozen=True)
class PremisesSector:
    """The premises' sector as seen from the sensor, ready to be the installation record's
    ``[sector]`` table. ``half_width_deg`` 0 means not entered: nothing can be attributed."""

    bearing_deg: float = setting(
        0.0, "compass bearing of the premises' centre (where the dog is kept) from the "
        "sensor, degrees clockwise from north (the same north as the array's orientation)",
        0.0, 360.0,
    )
    half_width_deg: float = setting(
        0.0, "half the angle the premises subtend at the sensor, degrees (from its two "
        "corners or a map); 0 = not entered", 0.0, 180.0,
    )
    distance_m: float = setting(0.0, "sensor to the premises' centre, m", 0.0, 1000.0)

    def __post_init__(self) -> None:
        bearing = _finite(self.bearing_deg, "sector.bearing_deg")
        half_width = _finite(self.half_width_deg, "sector.half_width_deg")
        distance = _finite(self.distance_m, "sector.distance_m")
        if not 0.0 <= bearing <= 360.0:
            raise ConfigError(f"config key 'sector.bearing_deg': {bearing} is outside 0-360")
        if not 0.0 <= half_width <= 180.0:
            raise ConfigError(
                f"config key 'sector.half_width_deg': {half_width} is outside 0-180 (half the "
                "angle the premises subtend; 180 = every direction)"
            )
        if distance < 0.0:
            raise ConfigError(f"config key 'sector.distance_m': {distance} is negative")
        object.__setattr__(self, "bearing_deg", bearing % 360.0)

    @classmethod
    def from_corners(cls, first_deg: float, second_deg: float,
                     distance_m: float = 0.0) -> PremisesSector:
        """The sector from the bearings of the premises' two outer corners, the smaller of
        the two angles between them (a premises never fills more than half the view)."""
        offset = angle_offset_deg(_finite(second_deg, "second corner"),
                                  _finite(first_deg, "first corner"))
        return cls((first_deg + offset / 2.0) % 360.0, abs(offset) / 2.0, distance_m)

    @classmethod
    def from_width(cls, bearing_deg: float, width_m: float, distance_m: float
                   ) -> PremisesSector:
        """The sector of a premises ``width_m`` wide, seen square-on from ``distance_m``."""
        if not (math.isfinite(width_m) and width_m > 0 and math.isfinite(distance_m)
                and distance_m > 0):
            raise ConfigError(f"sector: width {width_m} m at {distance_m} m: both must be "
                              "positive")
        return cls(bearing_deg, math.degrees(math.atan2(width_m / 2.0, distance_m)), distance_m)

    @property
    def entered(self) -> bool:
        return self.half_width_deg > 0.0

    @property
    def edges_deg(self) -> tuple[float, float]:
        """The sector's edges, counter-clockwise one first (the sector runs clockwise from
        it to the other)."""
        return ((self.bearing_deg - self.half_width_deg) % 360.0,
                (self.bearing_deg + self.half_width_deg) % 360.0)


def classify_bearing(sector: PremisesSector, bearing_deg: float | None,
                     uncertainty_deg: float | None = None) -> str:
    """``"premises"``, ``"elsewhere"`` or ``"no bearing"`` for one bearing (see the module's
    docstring for the rule). A bearing without an uncertainty gets
    :data:`ASSUMED_UNCERTAINTY_DEG`."""
    if bearing_deg is None or not sector.entered or not math.isfinite(bearing_deg):
        return NO_BEARING
    spread = ASSUMED_UNCERTAINTY_DEG if uncertainty_deg is None else uncertainty_deg
    if not math.isfinite(spread) or spread < 0:
        return NO_BEARING
    offset = abs(angle_offset_deg(bearing_deg, sector.bearing_deg))
    if sector.half_width_deg >= 180.0 and spread < 180.0:
        return PREMISES  # every direction is the premises'
    if offset + spread < sector.half_width_deg:
        return PREMISES
    # Wholly outside: the interval's nearer end is past the edge, and its farther end has
    # not come round to the other edge.
    if offset - spread >= sector.half_width_deg and offset + spread <= 360.0 - (
            sector.half_width_deg):
        return ELSEWHERE
    return NO_BEARING


def event_bearing(bearings: Iterable[tuple[float | None, float | None]]
                  ) -> tuple[float | None, float | None]:
    """One event's bearing and uncertainty from its dog stretches' (the wire's per-frame
    ``(bearing_deg, uncertainty_deg)``; None where a stretch had none).

    The bearing is the circular mean of the stretches' bearings; the uncertainty the larger
    of their median uncertainty and their circular standard deviation about that mean, so
    that stretches that disagree widen the interval (in the owner's favour). No stretch with
    a bearing: no bearing. A stretch without an uncertainty gets
    :data:`ASSUMED_UNCERTAINTY_DEG`.
    """
    found = [(b, ASSUMED_UNCERTAINTY_DEG if u is None else u) for b, u in bearings
             if b is not None and math.isfinite(b) and (u is None or math.isfinite(u))]
    if not found:
        return None, None
    east = sum(math.sin(math.radians(b)) for b, _ in found) / len(found)
    north = sum(math.cos(math.radians(b)) for b, _ in found) / len(found)
    resultant = math.hypot(east, north)
    if resultant < 1e-9:  # bearings that cancel out (opposite directions): none
        return None, None
    mean = math.degrees(math.atan2(east, north)) % 360.0
    spread = math.degrees(math.sqrt(max(-2.0 * math.log(min(resultant, 1.0)), 0.0)))
    uncertainties = sorted(u for _, u in found)
    median = uncertainties[len(uncertainties) // 2] if len(uncertainties) % 2 else (
        uncertainties[len(uncertainties) // 2 - 1] + uncertainties[len(uncertainties) // 2]
    ) / 2.0
    return mean, max(median, spread)


class HasBearing(Protocol):
    """What an event needs for attribution (the analyzer's events, once they carry the
    wire's bearing fields)."""

    @property
    def bearing_deg(self) -> float | None: ...

    @property
    def bearing_uncertainty_deg(self) -> float | None: ...


def attribute(sector: PremisesSector, events: Iterable[HasBearing]) -> list[str]:
    """The origin of each event, in order."""
    return [classify_bearing(sector, e.bearing_deg, e.bearing_uncertainty_deg) for e in events]


def count_origins(origins: Iterable[str]) -> dict[str, int]:
    """How many events of each origin, every origin present (0 when none)."""
    counts = dict.fromkeys(ORIGINS, 0)
    for origin in origins:
        counts[origin] += 1
    return counts


def attributed(event: DogEvent, bearings: Iterable[tuple[float | None, float | None]],
               sector: PremisesSector | None) -> DogEvent:
    """``event`` with its bearing (:func:`event_bearing` of the bearings of the dog frames it
    spans, ``DevicePipeline.frame_bearings``) and its origin against ``sector``
    (:func:`classify_bearing`; "no bearing" without a sector, or one not entered). Bearing and
    uncertainty are rounded to 0.1 degree, as stored, before they are classified."""
    bearing, uncertainty = event_bearing(bearings)
    if bearing is not None:
        bearing = round(bearing, 1) % 360.0
    if uncertainty is not None:
        uncertainty = round(uncertainty, 1)
    origin = NO_BEARING if sector is None else classify_bearing(sector, bearing, uncertainty)
    return replace(event, bearing_deg=bearing, bearing_uncertainty_deg=uncertainty,
                   origin=origin)


def from_premises(events: Iterable[DogEvent]) -> list[DogEvent]:
    """The events attributed to the premises' sector (the lower bound the rules are counted
    over a second time)."""
    return [e for e in events if e.origin == PREMISES]
