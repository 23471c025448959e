"""Both commands answer --help and fail with a readable message on bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [["barkwatch-sensor"], ["barkwatch-sensor", "run"], ["barkwatch"], ["barkwatch", "analyze"],
     ["barkwatch", "analyzer", "run"], ["barkwatch", "demo"]],
)
def test_help_answers(command: list[str]) -> None:
    result = subprocess.run([BIN / command[0], *command[1:], "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0
    assert "usage:" in result.stdout


def test_validate_config_names_the_bad_key(tmp_path: Path) -> None:
    config = tmp_path / "a.toml"
    config.write_text("[influx]\nbatch_points = 0\n")
    result = subprocess.run([BIN / "barkwatch", "analyzer", "validate-config", "--config", config],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "'influx.batch_points': 0 is below the minimum 1" in result.stderr


def test_validate_config_reads_the_event_verifier_and_names_a_bad_one(tmp_path: Path) -> None:
    config = tmp_path / "a.toml"
    damaged = tmp_path / "verifier.npz"
    damaged.write_bytes(b"PK\x03\x04 cut short")
    config.write_text(f'[detector]\nverifier_path = "{damaged}"\n')
    result = subprocess.run([BIN / "barkwatch", "analyzer", "validate-config", "--config", config],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"{damaged}: cannot read the event verifier" in result.stderr
    bundled = Path(__file__).resolve().parents[1] / "models" / "dog_verifier.npz"
    config.write_text(f'[detector]\nverifier_path = "{bundled}"\n')
    result = subprocess.run([BIN / "barkwatch", "analyzer", "validate-config", "--config", config],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_describe_lists_every_sensor_key() -> None:
    result = subprocess.run([BIN / "barkwatch-sensor", "validate-config", "--describe"],
                            capture_output=True, text=True, timeout=60)
    assert "calibration.full_scale_db = 120.0" in result.stdout


def test_missing_input_file_is_named(tmp_path: Path) -> None:
    config = tmp_path / "s.toml"
    config.write_text(f'device_id = "d"\n[outbox]\npath = "{tmp_path / "o.sqlite"}"\n')
    result = subprocess.run(
        [BIN / "barkwatch-sensor", "run", "--config", config, "--input", tmp_path / "none.wav"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"audio file {tmp_path / 'none.wav'} does not exist" in result.stderr
