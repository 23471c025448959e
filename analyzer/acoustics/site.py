"""The installation record of a device: where the dog is kept, where the sensor and the
premises boundary are, and the conditions sound travels in (TOML, one file per device).

Distances are measured from where the dog is kept, along the line towards the receiver: the
point 100 ft (30.48 m) beyond the premises boundary where the ordinance asks whether the
barking was plainly audible. The officer who installs the sensor fills it in
(``barkwatch site create``) and can update the weather defaults later.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from analyzer.acoustics.attribution import PremisesSector
from analyzer.acoustics.propagation import RECEIVER_BEYOND_BOUNDARY_M, metres_and_feet
from sensor.configfile import load, setting
from sensor.errors import ConfigError
from sensor.wire import DEVICE_ID_PATTERN

GROUND_FACTORS = {"hard": (0.0, 0.2), "mixed": (0.0, 1.0), "porous": (0.8, 1.0)}
"""ISO 9613-2 ground factor G range per ground type; the owner's-favour end is used."""


@dataclass(frozen=True)
class InstallationRecord:
    """One device's site. Distances in metres from where the dog is kept."""

    device_id: str = setting("", "the device installed here")
    address: str = setting("", "street address of the premises")
    dog_location: str = setting("", "where the dog is kept (e.g. 'kennel, back yard')")
    source_to_sensor_m: float = setting(0.0, "dog's usual place to the microphone, m",
                                        0.0, 1000.0)
    source_to_boundary_m: float = setting(0.0, "dog's usual place to the premises boundary "
                                          "towards the receiver, m", 0.0, 1000.0)
    distance_uncertainty_m: float = setting(1.0, "uncertainty of each distance (where the "
                                            "dog actually stands), m", 0.0, 100.0)
    source_height_m: float = setting(0.5, "height of the dog's mouth, m", 0.0, 10.0)
    sensor_height_m: float = setting(1.5, "height of the microphone, m", 0.0, 30.0)
    receiver_height_m: float = setting(1.5, "height of a listener's ear at the receiver, m",
                                       0.0, 30.0)
    ground: str = setting("mixed", "ground between dog and receiver: hard, porous, mixed",
                          choices=tuple(GROUND_FACTORS))
    ground_effect: bool = setting(True, "apply the ISO 9613-2 ground effect")
    temperature_c: float = setting(10.0, "air temperature for absorption, degC", -30.0, 50.0)
    humidity_pct: float = setting(70.0, "relative humidity for absorption, %", 5.0, 100.0)
    pressure_kpa: float = setting(101.325, "air pressure, kPa", 80.0, 110.0)
    weather_spread_c: float = setting(5.0, "temperature may differ by this much, degC",
                                      0.0, 30.0)
    weather_spread_pct: float = setting(15.0, "humidity may differ by this much, %",
                                        0.0, 50.0)
    calibration_uncertainty_db: float = setting(0.7, "standard uncertainty of the calibrated "
                                                "level at the sensor, dB", 0.0, 10.0)
    propagation_uncertainty_db: float = setting(3.0, "standard uncertainty of the propagation "
                                                "model (ISO 9613-2 Table 5: 3 dB), dB",
                                                0.0, 20.0)
    installed_by: str = setting("", "officer who installed the sensor")
    installed_at: str = setting("", "date of installation (ISO 8601)")
    sector: PremisesSector = setting(PremisesSector(), "the premises as seen from the sensor: "
                                     "whose dog each bearing points to (issue 36)")

    @property
    def source_to_receiver_m(self) -> float:
        """Distance from the dog to the receiver point, 100 ft beyond the boundary."""
        return self.source_to_boundary_m + RECEIVER_BEYOND_BOUNDARY_M

    @property
    def sensor_at_or_beyond_receiver(self) -> bool:
        """Whether the sensor itself stands 100 ft or more beyond the boundary."""
        return self.source_to_sensor_m >= self.source_to_receiver_m

    def summary(self) -> str:
        """A readable description with metres and feet."""
        lines = [
            f"device {self.device_id} at {self.address or '(no address)'}",
            f"dog kept: {self.dog_location or '(not described)'}",
            f"dog to sensor:     {metres_and_feet(self.source_to_sensor_m)}",
            f"dog to boundary:   {metres_and_feet(self.source_to_boundary_m)}",
            f"dog to receiver:   {metres_and_feet(self.source_to_receiver_m)} "
            "(100 ft beyond the boundary)",
            f"heights: dog {self.source_height_m} m, sensor {self.sensor_height_m} m, "
            f"listener {self.receiver_height_m} m; ground {self.ground}"
            f"{'' if self.ground_effect else ' (ground effect off)'}",
            f"air: {self.temperature_c} degC, {self.humidity_pct} % RH, {self.pressure_kpa} kPa",
            f"installed by {self.installed_by or '?'} on {self.installed_at or '?'}",
            f"premises sector:   {describe_sector(self.sector)}",
        ]
        if self.sensor_at_or_beyond_receiver:
            lines.append("the sensor is 100 ft or more beyond the boundary: audibility is "
                         "judged from what it measures")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        """Every field, for the parameters printed with results."""
        return dataclasses.asdict(self)


def describe_sector(sector: PremisesSector) -> str:
    """The premises' sector in words (``site show``, the field check)."""
    if not sector.entered:
        return "not entered: events are not attributed to the premises by bearing"
    first, second = sector.edges_deg
    distance = f", {sector.distance_m:g} m away" if sector.distance_m else ""
    return (f"{sector.bearing_deg:.1f} deg +- {sector.half_width_deg:.1f} (from {first:.1f} "
            f"clockwise to {second:.1f} deg, compass){distance}")


def validate_site(record: InstallationRecord) -> InstallationRecord:
    """Check what the types and bounds cannot: ids and geometry."""
    if not DEVICE_ID_PATTERN.match(record.device_id):
        raise ConfigError(f"site key 'device_id': {record.device_id!r} is missing or invalid")
    if record.source_to_sensor_m <= 0:
        raise ConfigError("site key 'source_to_sensor_m': must be more than 0 m")
    if record.source_to_sensor_m <= record.distance_uncertainty_m:
        raise ConfigError(
            "site key 'distance_uncertainty_m': must be less than source_to_sensor_m "
            f"({record.source_to_sensor_m} m), or the sensor could be at the dog"
        )
    return record


def load_site(path: str | Path) -> InstallationRecord:
    """Load and validate an installation record."""
    return validate_site(load(InstallationRecord, path))


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # A TOML basic string: JSON's escapes, but characters outside the BMP kept as they
        # are (JSON's surrogate-pair escapes are not TOML) and DEL escaped (TOML refuses it
        # raw); an address with an emoji or a DEL was written as an unreadable record.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    return repr(value)


def site_template(device_id: str, **values: object) -> str:
    """A commented TOML record to fill in (``values`` override the defaults)."""
    lines = ["# Barkwatch installation record. Distances in metres from where the dog is kept,",
             "# along the line towards the point 100 ft beyond the premises boundary."]
    for field in dataclasses.fields(InstallationRecord):
        if field.name == "sector":
            continue  # a table: after every plain key (TOML)
        value = device_id if field.name == "device_id" else values.get(field.name, field.default)
        lines.append(f"{field.name} = {_toml_value(value)}  # {field.metadata['description']}")
    sector = values.get("sector", PremisesSector())
    if isinstance(sector, dict):  # as InstallationRecord.as_dict gives it
        sector = PremisesSector(**sector)
    if not isinstance(sector, PremisesSector):
        raise ConfigError(f"site key 'sector': {type(sector).__name__} is not a sector")
    lines += ["", "# The premises as seen from the sensor (issue 36): compass bearings, degrees",
              "# clockwise from north, the same north as the sensor's [array] orientation_deg.",
              "[sector]"]
    for field in dataclasses.fields(PremisesSector):
        lines.append(f"{field.name} = {_toml_value(getattr(sector, field.name))}  "
                     f"# {field.metadata['description']}")
    return "\n".join(lines) + "\n"
