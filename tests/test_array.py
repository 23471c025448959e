"""The microphone array's geometry and orientation (sensor/array.py, issue 36)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sensor.array import PRESETS, ArraySettings
from sensor.configfile import build, describe
from sensor.errors import ConfigError


def array_from(table: dict) -> ArraySettings:
    """As the sensor configuration's ``[array]`` section would build it."""
    return build(ArraySettings, table, "array.")


@pytest.mark.parametrize(("preset", "capsules", "radius_m"), [
    ("respeaker-4mic", 4, 0.0405), ("respeaker-6mic", 6, 0.0463), ("uma8", 7, 0.043),
])
def test_presets_put_the_capsules_on_the_boards_circle(preset, capsules, radius_m):
    array = array_from({"preset": preset})
    radii = np.hypot(*array.positions_m()[:, :2].T)
    assert array.capsule_count == capsules
    assert np.all(np.abs(radii[radii > 0] - radius_m) < 0.0005)
    assert array.channels == PRESETS[preset].channels
    assert array.can_bear


def test_every_preset_names_its_source():
    for preset in PRESETS.values():
        assert "odas" in preset.source


def test_no_array_is_the_default_and_gives_no_bearing():
    array = ArraySettings()
    assert array.preset == "none" and not array.can_bear and array.capsule_count == 0


def test_custom_capsules_take_two_or_three_coordinates_and_channels_default_in_order():
    array = array_from({"preset": "custom", "capsules_m": [[0.05, 0.0], [0.0, 0.05, 0.01],
                                                           [-0.05, 0.0]]})
    assert array.capsules_m == ((0.05, 0.0, 0.0), (0.0, 0.05, 0.01), (-0.05, 0.0, 0.0))
    assert array.channels == (0, 1, 2)


def test_custom_channels_are_kept_in_capsule_order():
    array = array_from({"preset": "custom", "capsules_m": [[0.05, 0], [0, 0.05], [-0.05, 0]],
                        "channels": [3, 1, 2]})
    assert array.channels == (3, 1, 2)


def test_a_single_custom_capsule_is_allowed_and_cannot_bear():
    array = array_from({"preset": "custom", "capsules_m": [[0.0, 0.0]]})
    assert not array.can_bear


def test_compass_bearing_applies_the_orientation_clockwise_from_north():
    array = array_from({"preset": "uma8", "orientation_deg": 90})  # +x points east
    assert array.compass_bearing(0.0) == 90.0  # along +x
    assert array.compass_bearing(90.0) == 0.0  # +y is 90 degrees counter-clockwise: north
    assert array.compass_bearing(180.0) == 270.0


def test_a_board_facing_down_is_mirrored():
    up = array_from({"preset": "uma8", "orientation_deg": 30})
    down = array_from({"preset": "uma8", "orientation_deg": 30, "facing": "down"})
    assert up.compass_bearing(40.0) == 350.0
    assert down.compass_bearing(40.0) == 70.0


@pytest.mark.parametrize("facing", ["up", "down"])
def test_array_azimuth_inverts_compass_bearing(facing):
    array = array_from({"preset": "respeaker-6mic", "orientation_deg": 217.5, "facing": facing})
    for azimuth in (0.0, 12.5, 181.0, 359.0):
        assert math.isclose(array.array_azimuth(array.compass_bearing(azimuth)), azimuth,
                            abs_tol=1e-9)


def test_orientation_360_is_north():
    assert array_from({"preset": "uma8", "orientation_deg": 360}).orientation_deg == 0.0


@pytest.mark.parametrize(("table", "message"), [
    ({"preset": "custom"}, "needs the capsules"),
    ({"preset": "uma8", "capsules_m": [[0, 0]]}, "only read with preset = 'custom'"),
    ({"preset": "custom", "capsules_m": [[0, 0], [0.05, 0], [0.1, 0]]}, "lie on one line"),
    ({"preset": "custom", "capsules_m": [[0, 0], [0.05, 0]]}, "lie on one line"),
    ({"preset": "custom", "capsules_m": [[0, 0], [0.001, 0], [0, 0.05]]}, "entered twice"),
    ({"preset": "custom", "capsules_m": [[0, 0], [40, 0], [0, 40]]}, "millimetres"),
    ({"preset": "custom", "capsules_m": [[0, 0], [0.05]]}, r"capsules_m\[1\]"),
    ({"preset": "custom", "capsules_m": [[0, 0], [0.05, "a"], [0, 0.05]]},
     "expected a number"),
    ({"preset": "custom", "capsules_m": [[0, 0], [0.05, float("nan")], [0, 0.05]]},
     "not a finite number"),
    ({"preset": "custom", "capsules_m": [[0, 0], [0.05, 0], [0, 0.05]], "channels": [0, 1]},
     "2 channels for 3 capsules"),
    ({"preset": "custom", "capsules_m": [[0, 0], [0.05, 0], [0, 0.05]],
      "channels": [0, 1, 1]}, "names a channel twice"),
    ({"preset": "uma8", "channels": [0, 1, 2, 3, 4, 5, 40]}, r"channels\[6\].*outside 0-31"),
    ({"preset": "none", "channels": [0]}, "audio.channel"),
    ({"preset": "respeaker"}, "not one of"),
    ({"preset": "uma8", "orientation_deg": 400}, "above the maximum"),
    ({"preset": "uma8", "facing": "sideways"}, "not one of"),
    ({"preset": "uma8", "tilt": 3}, "unknown"),
])
def test_bad_geometry_is_refused_with_the_key_and_the_reason(table, message):
    with pytest.raises(ConfigError, match=message):
        array_from(table)


def test_too_many_capsules_are_refused():
    ring = [[0.1 * math.cos(k / 20 * 2 * math.pi), 0.1 * math.sin(k / 20 * 2 * math.pi)]
            for k in range(20)]
    with pytest.raises(ConfigError, match="at most 16"):
        array_from({"preset": "custom", "capsules_m": ring})


def test_every_key_is_described():
    lines = describe(ArraySettings, "array.")
    assert [line.split(" =")[0] for line in lines] == [
        "array.preset", "array.capsules_m", "array.channels", "array.orientation_deg",
        "array.facing"]
