"""Calibration with a 94 dB, 1 kHz calibrator: known offsets, refusals with reasons."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from sensor import capture
from sensor.calibration import CalibrationRefused, analyse_calibration_tone
from sensor.capture import AudioInputError, MicrophoneSource
from sensor.config import load_sensor_config
from tests.conftest import sine

RATE = 48000
TONE_DBFS = -26.0  # RMS re full scale: a 94 dB calibrator then means full_scale_db = 120


def _tone(frequency_hz: float = 1000.0, dbfs: float = TONE_DBFS, seconds: float = 4.0
          ) -> np.ndarray:
    return sine(frequency_hz, 10 ** (dbfs / 20), seconds, RATE)


def test_clean_tone_gives_the_expected_offset() -> None:
    result = analyse_calibration_tone(_tone(), RATE, 94.0)
    assert result.full_scale_db == pytest.approx(120.0, abs=0.01)
    assert result.tone_frequency_hz == pytest.approx(1000.0, abs=1.0)


def test_background_noise_does_not_pull_the_offset() -> None:
    rng = np.random.default_rng(11)
    noisy = _tone() + 10 ** (-60 / 20) * rng.standard_normal(4 * RATE)
    assert analyse_calibration_tone(noisy, RATE, 94.0).full_scale_db == pytest.approx(
        120.0, abs=0.01)


def test_114_db_calibrator_shifts_the_offset_by_20_db() -> None:
    assert analyse_calibration_tone(_tone(), RATE, 114.0).full_scale_db == pytest.approx(
        140.0, abs=0.01)


def test_wrong_frequency_is_refused_with_the_frequency_found() -> None:
    with pytest.raises(CalibrationRefused, match="strongest tone is at 500 Hz"):
        analyse_calibration_tone(_tone(500.0), RATE, 94.0)


def test_noisy_tone_is_refused_as_not_clean() -> None:
    rng = np.random.default_rng(5)
    noisy = _tone() + 10 ** (-36 / 20) * rng.standard_normal(4 * RATE)
    with pytest.raises(CalibrationRefused, match="not clean"):
        analyse_calibration_tone(noisy, RATE, 94.0)


def test_unsteady_tone_is_refused() -> None:
    t = np.arange(4 * RATE) / RATE
    wobbling = _tone() * (1.0 + 0.15 * np.sin(2 * np.pi * 0.5 * t))
    with pytest.raises(CalibrationRefused, match="not steady"):
        analyse_calibration_tone(wobbling, RATE, 94.0)


def test_clipped_capture_is_refused() -> None:
    with pytest.raises(CalibrationRefused, match="clipped"):
        analyse_calibration_tone(np.clip(_tone(dbfs=0.0), -0.999, 0.999), RATE, 94.0)


def test_short_capture_is_refused() -> None:
    with pytest.raises(CalibrationRefused, match="too short"):
        analyse_calibration_tone(_tone(seconds=1.0), RATE, 94.0)


def test_calibrate_command_stores_offset_and_reports_drift(tmp_path: Path) -> None:
    config = tmp_path / "sensor.toml"
    config.write_text('# the officer\'s notes stay\ndevice_id = "cal-1"\n'
                      '[calibration]\nfull_scale_db = 119.5\ndate = "2026-05-30T09:00:00Z"\n')
    recording = tmp_path / "calibrator.wav"
    soundfile.write(recording, _tone(), RATE, subtype="FLOAT")
    command = [Path(sys.executable).parent / "barkwatch-sensor", "calibrate", "--config", config,
               "--input", recording, "--calibrator", "Larson Davis CAL200 sn 1234"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "drift since the last calibration: +0.50 dB" in result.stdout
    stored = load_sensor_config(str(config))
    assert stored.calibration.full_scale_db == pytest.approx(120.0, abs=0.01)
    assert stored.calibration.calibrator == "Larson Davis CAL200 sn 1234"
    assert stored.calibration.date.startswith("20")
    assert "# the officer's notes stay" in config.read_text()


def test_calibrate_command_refuses_and_changes_nothing(tmp_path: Path) -> None:
    config = tmp_path / "sensor.toml"
    original = 'device_id = "cal-1"\n[calibration]\nfull_scale_db = 119.5\n'
    config.write_text(original)
    recording = tmp_path / "wrong.wav"
    soundfile.write(recording, _tone(250.0), RATE, subtype="FLOAT")
    result = subprocess.run(
        [Path(sys.executable).parent / "barkwatch-sensor", "calibrate", "--config", config,
         "--input", recording, "--calibrator", "x"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "strongest tone is at 250 Hz" in result.stderr
    assert config.read_text() == original


def _calibrate(config: Path, recording: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [Path(sys.executable).parent / "barkwatch-sensor", "calibrate", "--config", config,
         "--input", recording, "--calibrator", "x"], capture_output=True, text=True, timeout=120)


def test_first_calibration_reports_no_drift_from_the_uncalibrated_default(
    tmp_path: Path,
) -> None:
    # A new device's sensor.toml carries the default full_scale_db but no calibration date.
    config = tmp_path / "sensor.toml"
    config.write_text('device_id = "cal-1"\n[calibration]\nfull_scale_db = 120.0\ndate = ""\n')
    recording = tmp_path / "calibrator.wav"
    soundfile.write(recording, _tone(dbfs=-30.0), RATE, subtype="FLOAT")  # full scale: 124 dB
    result = _calibrate(config, recording)
    assert result.returncode == 0, result.stderr
    assert "(first calibration)" in result.stdout
    assert "drift" not in result.stdout + result.stderr
    assert load_sensor_config(str(config)).calibration.full_scale_db == pytest.approx(124.0,
                                                                                      abs=0.01)


def test_no_capture_device_is_named_as_such_and_points_to_list_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # PortAudio with no input at all; its own message is "Error querying device -1".
    monkeypatch.setattr(capture, "list_input_devices", lambda: [])
    with pytest.raises(AudioInputError) as refused:
        MicrophoneSource("", 48000)
    message = str(refused.value)
    assert "no audio capture device exists" in message
    assert "--list-devices" in message
    assert "--input FILE" in message
