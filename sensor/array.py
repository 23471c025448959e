"""Microphone array geometry: where the capsules are, which input channel carries each, and
which way the array faces (issue 36).

Coordinates are in metres in the array's own frame: x and y in the board's plane, z out of
its top face (the side the capsules' ports open to). An azimuth in the array frame is
counted counter-clockwise from +x seen from above the top face (right-handed, as ODAS and
pyroomacoustics count); a compass bearing clockwise from north, as a phone compass and a
map give it. At installation the officer points a phone along the board's +x axis and
enters that bearing as ``orientation_deg``; a board hung face down under an eave
(``facing = "down"``) sees the world mirrored, which :meth:`ArraySettings.compass_bearing`
undoes. The installation check (a clap at a known spot, issue 36 item 5) catches a board
entered the wrong way round.

The presets are the geometries that ODAS (introlab/odas, the open-source localisation
library these boards' vendors point to) ships for them; each preset says which file. The
board's own x axis is ODAS's: a preset's docstring says which capsule lies on it.

``ArraySettings`` is a frozen dataclass built with :func:`sensor.configfile.setting`, ready
to be the sensor configuration's ``[array]`` section::

    [array]
    preset = "respeaker-4mic"
    orientation_deg = 135.0

or, for capsules of one's own::

    [array]
    preset = "custom"
    capsules_m = [[0.05, 0.0], [0.0, 0.05], [-0.05, 0.0], [0.0, -0.05]]
    channels = [0, 1, 2, 3]
    orientation_deg = 10.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sensor.configfile import setting
from sensor.errors import ConfigError

SECTION = "array"  # the configuration section's name, for the key paths in error messages
MAX_CAPSULES = 16
MAX_CHANNEL = 31  # as AudioSettings.channel
# A board, not a network of separate microphones: the far-field model (a plane wave across
# the array) needs the aperture far below the 10 m to the nearest dog.
MAX_RADIUS_M = 0.5
MIN_SPACING_M = 0.003  # two capsules closer than this are one capsule entered twice
# Capsules whose horizontal positions lie within this of one line cannot tell front from back.
MIN_WIDTH_M = 0.005


@dataclass(frozen=True)
class Preset:
    """A board's capsule coordinates and the input channel of each, with where they come
    from."""

    name: str
    description: str
    capsules_m: tuple[tuple[float, float, float], ...]
    channels: tuple[int, ...]
    source: str


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            "respeaker-4mic",
            "Seeed ReSpeaker 4-Mic Array for Raspberry Pi (HAT, AC108 codec): 4 capsules on the "
            "corners of a square, 40.5 mm from its centre (81 mm across the diagonal); capsule "
            "1 (channel 0) on -x, capsule 2 (channel 1) on +y",
            ((-0.0405, 0.0, 0.0), (0.0, 0.0405, 0.0), (0.0405, 0.0, 0.0), (0.0, -0.0405, 0.0)),
            (0, 1, 2, 3),
            "introlab/odas config/odaslive/respeaker_4_mic_array.cfg (mics mu, map 1-4 of 4 "
            "channels); Seeed's respeaker/mic_array uses the same 0.08127 m diagonal",
        ),
        Preset(
            "respeaker-6mic",
            "Seeed ReSpeaker 6-Mic Circular Array kit for Raspberry Pi: 6 capsules on a circle "
            "of radius 46.3 mm, 60 degrees apart; capsule 2 (channel 1) on -x, capsule 5 "
            "(channel 4) on +x; channels 6 and 7 are the playback loopback",
            ((-0.0232, 0.0401, 0.0), (-0.0463, 0.0, 0.0), (-0.0232, -0.0401, 0.0),
             (0.0232, -0.0401, 0.0), (0.0463, 0.0, 0.0), (0.0232, 0.0401, 0.0)),
            (0, 1, 2, 3, 4, 5),
            "introlab/odas config/odaslive/respeaker_6_mic_array.cfg ('Circular shape, "
            "R = 0.0463m', mics mu, map 1-6 of 8 channels)",
        ),
        Preset(
            "uma8",
            "miniDSP UMA-8 USB microphone array (raw-channel firmware): a centre capsule "
            "(channel 0) and 6 on a circle of radius 43 mm, 60 degrees apart, the first "
            "(channel 1) on +y; channel 7 is not a capsule",
            ((0.0, 0.0, 0.0), (0.0, 0.043, 0.0), (0.037, 0.021, 0.0), (0.037, -0.021, 0.0),
             (0.0, -0.043, 0.0), (-0.037, -0.021, 0.0), (-0.037, 0.021, 0.0)),
            (0, 1, 2, 3, 4, 5, 6),
            "introlab/odas config/minidsp/uma8.json and config/odaslive/minidsp.cfg (mics mu, "
            "map 1-7 of 8 channels at 48 kHz)",
        ),
    )
}
NO_ARRAY = "none"  # one measurement microphone, as before issue 36: never a bearing
CUSTOM = "custom"
PRESET_NAMES = (NO_ARRAY, CUSTOM, *PRESETS)
FACINGS = ("up", "down")


def _key(name: str) -> str:
    return f"config key '{SECTION}.{name}'"


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number, got {type(value).__name__} {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ConfigError(f"{where}: {number} is not a finite number")
    return number


def _capsules(raw: object) -> tuple[tuple[float, float, float], ...]:
    if not isinstance(raw, list | tuple):
        raise ConfigError(f"{_key('capsules_m')}: expected an array of [x, y] or [x, y, z] "
                          f"coordinates in metres, got {type(raw).__name__}")
    if len(raw) > MAX_CAPSULES:
        raise ConfigError(f"{_key('capsules_m')}: {len(raw)} capsules; at most {MAX_CAPSULES}")
    capsules = []
    for index, point in enumerate(raw):
        where = _key(f"capsules_m[{index}]")
        if not isinstance(point, list | tuple) or len(point) not in (2, 3):
            raise ConfigError(f"{where}: expected [x, y] or [x, y, z] in metres, got {point!r}")
        xyz = [_number(v, where) for v in point] + [0.0] * (3 - len(point))
        radius = math.hypot(*xyz)
        if radius > MAX_RADIUS_M:
            raise ConfigError(
                f"{where}: {radius:.3f} m from the array's centre; at most {MAX_RADIUS_M} m "
                "(a bearing needs the capsules on one board: are these millimetres?)"
            )
        capsules.append((xyz[0], xyz[1], xyz[2]))
    return tuple(capsules)


def _check_layout(capsules: tuple[tuple[float, float, float], ...]) -> None:
    points = np.asarray(capsules, dtype=float).reshape(-1, 3)
    for i in range(len(points)):
        for j in range(i):
            spacing = float(np.linalg.norm(points[i] - points[j]))
            if spacing < MIN_SPACING_M:
                raise ConfigError(
                    f"{_key('capsules_m')}: capsules {j} and {i} are {spacing * 1000:.1f} mm "
                    f"apart; at least {MIN_SPACING_M * 1000:.0f} mm (one capsule entered twice?)"
                )
    if len(points) >= 2:
        # The horizontal spread across the array's narrowest direction: zero for a line.
        centred = points[:, :2] - points[:, :2].mean(axis=0)
        width = float(np.linalg.svd(centred, compute_uv=False)[-1]) * 2 / math.sqrt(len(points))
        if width < MIN_WIDTH_M:
            raise ConfigError(
                f"{_key('capsules_m')}: the capsules lie on one line in the board's plane "
                "(x, y); such an array cannot tell a bark in front from one behind. Give at "
                "least three capsules that are not in a line"
            )


def _channels(raw: object, count: int) -> tuple[int, ...]:
    if not isinstance(raw, list | tuple):
        raise ConfigError(f"{_key('channels')}: expected an array of input channel numbers")
    channels = []
    for index, value in enumerate(raw):
        where = _key(f"channels[{index}]")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer channel, got {value!r}")
        if not 0 <= value <= MAX_CHANNEL:
            raise ConfigError(f"{where}: channel {value} is outside 0-{MAX_CHANNEL}")
        channels.append(value)
    if len(channels) != count:
        raise ConfigError(
            f"{_key('channels')}: {len(channels)} channels for {count} capsules; give one "
            "input channel per capsule, in the order of capsules_m"
        )
    if len(set(channels)) != len(channels):
        raise ConfigError(f"{_key('channels')}: {list(channels)} names a channel twice")
    return tuple(channels)


@dataclass(frozen=True)
class ArraySettings:
    """The microphone array: its geometry (a preset or capsule coordinates), the input channel
    of each capsule, and its orientation. Validated when made; the error names the key."""

    preset: str = setting(
        NO_ARRAY, "the board: 'none' (one microphone, no bearing), 'custom' (capsules_m), or "
        + ", ".join(repr(p) for p in PRESETS), choices=PRESET_NAMES,
    )
    capsules_m: tuple | list = setting(
        (), "with preset = 'custom': capsule coordinates [[x, y] or [x, y, z], ...] in metres, "
        "x and y in the board's plane, z out of its top face"
    )
    channels: tuple | list = setting(
        (), "input channel of each capsule, in capsule order; empty = the preset's "
        "(custom: 0, 1, 2, ...)"
    )
    orientation_deg: float = setting(
        0.0, "compass bearing of the board's +x axis, degrees clockwise from north (a phone "
        "compass along the board at installation; the same north as the premises' sector)",
        0.0, 360.0,
    )
    facing: str = setting(
        "up", "'up': the capsules' side towards the sky; 'down': hung face down (mirrored)",
        choices=FACINGS,
    )

    def __post_init__(self) -> None:
        if self.preset not in PRESET_NAMES:
            raise ConfigError(f"{_key('preset')}: {str(self.preset)[:40]!r} is not one of "
                              f"{list(PRESET_NAMES)}")
        if self.facing not in FACINGS:
            raise ConfigError(f"{_key('facing')}: {str(self.facing)[:40]!r} is not 'up' or "
                              "'down'")
        orientation = _number(self.orientation_deg, _key("orientation_deg"))
        if not 0.0 <= orientation <= 360.0:
            raise ConfigError(f"{_key('orientation_deg')}: {orientation} is outside 0-360")
        capsules = _capsules(self.capsules_m)
        if self.preset == CUSTOM:
            if not capsules:
                raise ConfigError(f"{_key('capsules_m')}: preset = 'custom' needs the capsules' "
                                  "coordinates")
        elif capsules:
            raise ConfigError(
                f"{_key('capsules_m')}: only read with preset = 'custom' (preset is "
                f"{self.preset!r}: remove capsules_m or set preset = 'custom')"
            )
        elif self.preset in PRESETS:
            capsules = PRESETS[self.preset].capsules_m
        _check_layout(capsules)
        if self.preset == NO_ARRAY:
            if self.channels:
                raise ConfigError(f"{_key('channels')}: preset = 'none' has no capsules to map; "
                                  "the measurement channel is audio.channel")
            channels: tuple[int, ...] = ()
        elif self.channels:
            channels = _channels(self.channels, len(capsules))
        elif self.preset in PRESETS:
            channels = PRESETS[self.preset].channels
        else:
            channels = tuple(range(len(capsules)))
        object.__setattr__(self, "capsules_m", capsules)
        object.__setattr__(self, "channels", channels)
        object.__setattr__(self, "orientation_deg", orientation % 360.0)

    @property
    def capsule_count(self) -> int:
        """How many capsules the array has (0 for 'none')."""
        return len(self.capsules_m)

    @property
    def can_bear(self) -> bool:
        """Whether this array can give a bearing at all (two or more capsules; validation
        has already refused capsules in a line)."""
        return self.capsule_count >= 2

    def positions_m(self) -> np.ndarray:
        """Capsule coordinates, shape (capsules, 3), metres, in the array frame."""
        return np.asarray(self.capsules_m, dtype=np.float64).reshape(-1, 3)

    def compass_bearing(self, azimuth_deg: float) -> float:
        """The compass bearing (degrees clockwise from north, 0-360) of an azimuth in the
        array frame (degrees counter-clockwise from +x, seen from the top face)."""
        seen_from_above = azimuth_deg if self.facing == "up" else -azimuth_deg
        return (self.orientation_deg - seen_from_above) % 360.0

    def array_azimuth(self, bearing_deg: float) -> float:
        """The inverse of :meth:`compass_bearing`: a compass bearing's azimuth in the array
        frame, 0-360."""
        seen_from_above = self.orientation_deg - bearing_deg
        return (seen_from_above if self.facing == "up" else -seen_from_above) % 360.0

    def describe(self) -> str:
        """One line for logs and the field check."""
        if not self.can_bear:
            return "one microphone (no bearing)"
        name = PRESETS[self.preset].description if self.preset in PRESETS else "custom array"
        return (f"{name.split(':')[0]}, {self.capsule_count} capsules on channels "
                f"{list(self.channels)}, +x towards {self.orientation_deg:.0f} deg, "
                f"facing {self.facing}")
