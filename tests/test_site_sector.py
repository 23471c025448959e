"""The premises' sector in the installation record (issue 36): `site create` asks for it (two
corners' bearings, or a width and distance), the record keeps it as `[sector]`, `site show`
says it, and a bad one is refused naming what was wrong."""

from __future__ import annotations

import math

import pytest

from analyzer import cli as analyzer_cli
from analyzer.acoustics.attribution import PremisesSector
from analyzer.acoustics.site import InstallationRecord, describe_sector, load_site, site_template


def create(tmp_path, *options: str) -> tuple[int, object]:
    record = tmp_path / "yard-7.toml"
    code = analyzer_cli.main(["site", "create", str(record), "--device", "yard-7",
                              "--sensor-m", "20", "--boundary-m", "5", *options])
    return code, record


def test_the_sector_from_two_corners_is_written_and_read_back(tmp_path, capsys):
    code, record = create(tmp_path, "--corners", "350", "20")
    assert code == 0
    site = load_site(record)
    assert site.sector.bearing_deg == pytest.approx(5.0)  # across north
    assert site.sector.half_width_deg == pytest.approx(15.0)
    assert site.sector.distance_m == 20.0  # the dog's distance, unless given
    assert "premises sector 5.0 deg +- 15.0 (from 350.0 clockwise to 20.0 deg" in (
        capsys.readouterr().out)


def test_the_sector_from_a_width_and_distance(tmp_path):
    code, record = create(tmp_path, "--premises-bearing", "90", "--premises-width-m", "20",
                          "--premises-distance-m", "10")
    assert code == 0
    sector = load_site(record).sector
    assert sector.bearing_deg == 90.0 and sector.distance_m == 10.0
    assert sector.half_width_deg == pytest.approx(math.degrees(math.atan(1.0)))  # 45


def test_without_a_sector_nothing_is_attributed_and_show_says_so(tmp_path, capsys):
    code, record = create(tmp_path)
    assert code == 0 and not load_site(record).sector.entered
    capsys.readouterr()
    assert analyzer_cli.main(["site", "show", str(record)]) == 0
    assert "premises sector:   not entered: events are not attributed" in (
        capsys.readouterr().out)


@pytest.mark.parametrize(("options", "message"), [
    (["--premises-bearing", "90"], "--premises-bearing and --premises-width-m come together"),
    (["--corners", "10", "40", "--premises-width-m", "5"], "--corners gives the sector by"),
    (["--premises-bearing", "400", "--premises-width-m", "5"], "--premises-bearing 400.0: a "
     "compass bearing is 0-360"),
    (["--premises-bearing", "10", "--premises-width-m", "-5"], "both must be positive"),
    (["--premises-distance-m", "12"], "--premises-distance-m needs --corners"),
])
def test_a_bad_sector_on_the_command_line_is_refused_naming_it(tmp_path, capsys, options,
                                                                message):
    code, record = create(tmp_path, *options)
    assert code == 1 and not record.exists()
    assert message in capsys.readouterr().err


def test_a_bad_sector_in_the_record_names_its_key(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    text = site_template("yard-7", source_to_sensor_m=20.0, source_to_boundary_m=5.0)
    path.write_text(text.replace("half_width_deg = 0.0", "half_width_deg = 200.0"))
    assert analyzer_cli.main(["site", "validate", str(path)]) == 1
    assert "'sector.half_width_deg': 200.0 is above the maximum 180" in capsys.readouterr().err
    path.write_text(text.replace("[sector]", "[sector]\nwidth_m = 3"))
    assert analyzer_cli.main(["site", "validate", str(path)]) == 1
    assert "'sector.width_m' is unknown" in capsys.readouterr().err


def test_a_record_written_from_another_keeps_its_sector():
    sector = PremisesSector.from_corners(100.0, 140.0, 15.0)
    record = InstallationRecord(device_id="yard-7", source_to_sensor_m=15.0, sector=sector)
    values = {k: v for k, v in record.as_dict().items() if k != "device_id"}
    import tomllib

    from sensor.configfile import build
    again = build(InstallationRecord, tomllib.loads(site_template("yard-7", **values)))
    assert again.sector == sector
    assert describe_sector(sector).startswith("120.0 deg +- 20.0 (from 100.0 clockwise to 140.0")
