"""The installation check of a microphone array (issue 36, item 5; sensor/bearing_check.py and
``barkwatch-sensor bearing-check``): claps from a known bearing, as a plane wave with exact
delays at a UMA-8 and a ReSpeaker 4-mic board, are measured where they came from; an array
turned from its configured orientation fails the check with the orientation that would fix it;
noise alone gives no bearing."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import soundfile

from sensor.array import ArraySettings
from sensor.bearing_check import check_bearing, circular_median_deg, find_claps
from sensor.cli import main

C = 343.0
RATE = 16000
CLAPS_S = (1.0, 2.7, 4.4)


def claps_as_plane_wave(array: ArraySettings, bearing_deg: float, seconds: float = 6.0,
                        echo: tuple[float, float, float] | None = None) -> np.ndarray:
    """Three hand claps (5 ms bursts of noise decaying over 10 ms) arriving at ``array`` as a
    plane wave from compass ``bearing_deg``, each capsule's copy advanced by its exact delay
    in the frequency domain, over independent noise 50 dB under the claps' peak power;
    (samples, channels) on the array's channels (others silent). ``echo``: (bearing, delay s,
    gain) of a reflection of every clap, a façade's."""
    n = round(seconds * RATE)
    rng = np.random.default_rng(3)
    clap = np.zeros(n)
    burst = round(0.005 * RATE)
    for at in CLAPS_S:
        start = round(at * RATE)
        clap[start:start + burst] = rng.standard_normal(burst)
        tail = np.arange(round(0.03 * RATE))
        clap[start + burst:start + burst + tail.size] = (
            rng.standard_normal(tail.size) * np.exp(-tail / (0.01 * RATE)))
    spectrum = np.fft.rfft(clap)
    freqs = np.fft.rfftfreq(n, 1.0 / RATE)
    out = rng.standard_normal((n, max(array.channels) + 1)) * 10 ** (-50 / 20)
    arrivals = [(bearing_deg, 0.0, 1.0)] + ([echo] if echo else [])
    for towards_deg, delay_s, gain in arrivals:
        azimuth = np.radians(array.array_azimuth(towards_deg))
        advance = array.positions_m() @ np.array([np.cos(azimuth), np.sin(azimuth), 0.0]) / C
        for channel, t in zip(array.channels, advance - delay_s, strict=True):
            out[:, channel] += gain * np.fft.irfft(spectrum * np.exp(2j * np.pi * freqs * t), n)
    return out * 0.1


def error_deg(a: float, b: float) -> float:
    return abs((a - b + 180.0) % 360.0 - 180.0)


@pytest.mark.parametrize("preset", ["uma8", "respeaker-4mic"])
@pytest.mark.parametrize("bearing", [20.0, 200.0, 315.0])
def test_claps_from_a_known_bearing_are_measured_there(preset: str, bearing: float) -> None:
    array = ArraySettings(preset=preset, orientation_deg=70.0)
    check = check_bearing(claps_as_plane_wave(array, bearing), RATE, array, array.channels[0],
                          bearing)
    assert [round(t, 2) for t in check.claps_s] == list(CLAPS_S)
    assert all(b.bearing_deg is not None and error_deg(b.bearing_deg, bearing) < 3.0
               for b in check.bearings)
    assert check.passed and check.measured_deg is not None
    assert error_deg(check.measured_deg, bearing) < 3.0


def test_a_facade_echo_from_elsewhere_does_not_move_the_clap() -> None:
    array = ArraySettings(preset="respeaker-6mic")
    audio = claps_as_plane_wave(array, 80.0, echo=(200.0, 0.012, 0.6))
    check = check_bearing(audio, RATE, array, 0, 80.0)
    assert check.passed and check.measured_deg is not None
    assert error_deg(check.measured_deg, 80.0) < 5.0


def test_an_array_turned_from_its_configured_orientation_fails_with_the_fix() -> None:
    mounted = ArraySettings(preset="uma8", orientation_deg=100.0)  # how it really points
    configured = ArraySettings(preset="uma8", orientation_deg=10.0)  # what the file says
    audio = claps_as_plane_wave(mounted, 150.0)
    check = check_bearing(audio, RATE, configured, 0, 150.0)
    assert not check.passed
    assert check.offset_deg is not None and error_deg(check.offset_deg, -90.0) < 3.0
    assert check.suggested_orientation_deg is not None
    assert error_deg(check.suggested_orientation_deg, 100.0) < 3.0
    fixed = check_bearing(audio, RATE, ArraySettings(
        preset="uma8", orientation_deg=check.suggested_orientation_deg), 0, 150.0)
    assert fixed.passed


def test_noise_alone_has_no_clap_and_no_bearing() -> None:
    array = ArraySettings(preset="uma8")
    noise = np.random.default_rng(1).standard_normal((3 * RATE, 8)) * 0.01
    check = check_bearing(noise, RATE, array, 0, 90.0)
    assert check.claps_s == ()
    assert check.measured_deg is None and not check.passed
    assert [b.reason for b in check.bearings] == ["diffuse"]


def test_claps_are_found_where_they_are_and_nowhere_else() -> None:
    array = ArraySettings(preset="uma8")
    channel = claps_as_plane_wave(array, 0.0)[:, 0]
    peaks = find_claps(channel, RATE)
    assert [round(p / RATE, 2) for p in peaks] == list(CLAPS_S)
    assert find_claps(channel[: round(0.9 * RATE)], RATE) == []


def test_the_circular_median_crosses_north() -> None:
    assert circular_median_deg([358.0, 2.0, 1.0, 90.0, 355.0]) == 1.0


def _config(tmp_path: Path, orientation: float) -> Path:
    path = tmp_path / "sensor.toml"
    path.write_text(f'device_id = "yard-1"\n[audio]\nsample_rate = {RATE}\nchannel = 0\n'
                    f'[array]\npreset = "uma8"\norientation_deg = {orientation}\n')
    return path


def test_the_command_prints_the_bearing_and_exits_by_the_verdict(tmp_path, capsys) -> None:
    recording = tmp_path / "claps.wav"
    soundfile.write(recording, claps_as_plane_wave(ArraySettings(preset="uma8",
                    orientation_deg=45.0), 250.0), RATE, subtype="FLOAT")  # fmt: skip
    config = _config(tmp_path, 45.0)
    rc = main(["bearing-check", "--config", str(config), "--expected", "250", "--input",
               str(recording), "--no-publish"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("clap at") == 3 and "the array's orientation is right" in out
    wrong = main(["bearing-check", "--config", str(_config(tmp_path, 135.0)), "--expected",
                  "250", "--input", str(recording), "--no-publish"])
    out = capsys.readouterr().out
    assert wrong == 1 and "set [array] orientation_deg = 45" in out


def test_a_result_the_broker_never_got_is_printed_and_the_command_exits_3(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recording = tmp_path / "claps.wav"
    soundfile.write(recording, claps_as_plane_wave(ArraySettings(preset="uma8"), 250.0), RATE,
                    subtype="FLOAT")
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = _config(tmp_path, 0.0)
    config.write_text(config.read_text() + f"[mqtt]\nport = {port}\n")
    rc = main(["bearing-check", "--config", str(config), "--expected", "250", "--input",
               str(recording), "--publish-timeout", "1"])
    out, err = capsys.readouterr()
    assert rc == 3 and "the array's orientation is right" in out
    assert "the result was not sent to the broker" in err and "connection refused" in err


def test_the_command_without_an_array_says_so(tmp_path, capsys) -> None:
    path = tmp_path / "sensor.toml"
    path.write_text('device_id = "yard-1"\n')
    assert main(["bearing-check", "--config", str(path), "--expected", "10"]) == 1
    assert "no microphone array" in capsys.readouterr().err
