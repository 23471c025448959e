"""Configuration files: unknown keys, wrong types and out-of-range values are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.config import load_analyzer_config
from sensor.config import load_sensor_config
from sensor.errors import ConfigError


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return str(path)


def test_valid_sensor_config_loads(tmp_path: Path) -> None:
    config = load_sensor_config(_write(tmp_path, 'device_id = "yard-7"\n[mqtt]\nport = 8883\n'))
    assert (config.device_id, config.mqtt.port, config.audio.sample_rate) == ("yard-7", 8883, 48000)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('device_id = "d"\n[mqtt]\nprot = 1\n', "'mqtt.prot' is unknown"),
        ('device_id = "d"\n[mqtt]\nport = 70000\n', "'mqtt.port': 70000 is above the maximum"),
        ('device_id = "d"\n[mqtt]\nport = "1883"\n', "'mqtt.port': expected int"),
        ('device_id = "d"\n[audio]\nsample_rate = 22050\n', "'audio.sample_rate': 22050 is not"),
        ('device_id = "d"\nmqtt = 3\n', "'mqtt': expected a table"),
        ("[mqtt]\nport = 1883\n", "'device_id'"),
        ('device_id = "d"\n[mqtt\n', "not valid TOML"),
    ],
)
def test_bad_sensor_config_names_key_and_reason(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_sensor_config(_write(tmp_path, text))


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_sensor_config(str(tmp_path / "nope.toml"))


def test_analyzer_config_rejects_unknown_influx_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'influx.databse' is unknown"):
        load_analyzer_config(_write(tmp_path, '[influx]\ndatabse = "x"\n'))


def test_shipped_example_configs_are_valid() -> None:
    root = Path(__file__).resolve().parent.parent / "deploy"
    assert load_sensor_config(str(root / "sensor.example.toml")).device_id == "glencoe-0001"
    assert load_analyzer_config(str(root / "analyzer.example.toml")).influx.database == "barkwatch"
