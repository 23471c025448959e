"""Direction of arrival on a microphone array (sensor/doa.py, issue 36): known answers."""

from __future__ import annotations

import numpy as np
import pyroomacoustics as pra
import pytest

from sensor.array import PRESETS, ArraySettings
from sensor.doa import (
    DIFFUSE,
    NO_CAPSULES,
    TOO_SHORT,
    DoaOptions,
    estimate_bearing,
    plan_doa,
    srp_phat,
)

RATE = 16_000
C = 343.0


def plane_wave(array: ArraySettings, azimuth_deg: float, seconds: float = 1.0,
               rate: int = RATE, seed: int = 0, elevation_deg: float = 0.0) -> np.ndarray:
    """Broadband noise arriving as a plane wave from ``azimuth_deg`` (array frame), each
    capsule's copy advanced by its exact fractional delay (applied in the frequency domain);
    (samples, capsules)."""
    n = int(seconds * rate)
    rng = np.random.default_rng(seed)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1.0 / rate)
    a, e = np.radians(azimuth_deg), np.radians(elevation_deg)
    towards = np.array([np.cos(a) * np.cos(e), np.sin(a) * np.cos(e), np.sin(e)])
    advance = array.positions_m() @ towards / C
    return np.stack([np.fft.irfft(spectrum * np.exp(2j * np.pi * freqs * t), n)
                     for t in advance], axis=1)


def bursts(signal: np.ndarray, rate: int = RATE) -> np.ndarray:
    """The signal gated into 0.15-s bursts every 0.3 s (barks have onsets; the estimate
    weights them)."""
    t = np.arange(signal.shape[0]) / rate
    return signal * ((t % 0.3) < 0.15)[:, None]


def error_deg(a: float, b: float) -> float:
    return abs((a - b + 180.0) % 360.0 - 180.0)


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("azimuth", [0.0, 33.3, 97.0, 181.5, 256.0, 333.0])
def test_a_plane_wave_gives_its_direction_on_each_board(preset, azimuth):
    array = ArraySettings(preset=preset)
    estimate = estimate_bearing(plane_wave(array, azimuth), plan_doa(array, RATE))
    assert estimate.has_bearing and estimate.reason == ""
    assert error_deg(estimate.bearing_deg, array.compass_bearing(azimuth)) < 0.5
    # steady noise: only its bins' chance rises over the frame before count (0.25)
    assert estimate.sharpness > 0.2
    assert estimate.uncertainty_deg == DoaOptions().min_uncertainty_deg


@pytest.mark.parametrize("preset", list(PRESETS))
def test_a_plane_wave_in_bursts_gives_a_sharp_response(preset):
    """Each burst's onset is new power in every bin: the response peaks near 1."""
    array = ArraySettings(preset=preset)
    estimate = estimate_bearing(bursts(plane_wave(array, 97.0)), plan_doa(array, RATE))
    assert error_deg(estimate.bearing_deg, array.compass_bearing(97.0)) < 0.5
    assert estimate.sharpness > 0.7


@pytest.mark.parametrize("preset", list(PRESETS))
def test_a_plane_wave_at_48_khz_and_slightly_from_above(preset):
    array = ArraySettings(preset=preset)
    audio = plane_wave(array, 140.0, rate=48_000, elevation_deg=10.0)
    estimate = estimate_bearing(audio, plan_doa(array, 48_000))
    assert error_deg(estimate.bearing_deg, array.compass_bearing(140.0)) < 0.5


@pytest.mark.parametrize(("orientation", "facing", "expected"), [
    (0.0, "up", 300.0), (90.0, "up", 30.0), (250.0, "up", 190.0), (90.0, "down", 150.0),
])
def test_the_bearing_turns_with_the_configured_orientation(orientation, facing, expected):
    """The same sound in the board's frame (60 degrees counter-clockwise of +x) is at
    orientation - 60 on the compass, or orientation + 60 with the board face down."""
    array = ArraySettings(preset="respeaker-4mic", orientation_deg=orientation, facing=facing)
    estimate = estimate_bearing(plane_wave(array, 60.0), plan_doa(array, RATE))
    assert error_deg(estimate.bearing_deg, expected) < 0.5


def test_capsules_are_read_from_their_channels():
    """The 6-mic board's capsules are channels 0-5 of 8; the rest is not sound."""
    array = ArraySettings(preset="respeaker-6mic")
    wave = plane_wave(array, 200.0)
    audio = np.concatenate([wave, np.random.default_rng(1).standard_normal((len(wave), 2))],
                           axis=1)
    estimate = estimate_bearing(audio, plan_doa(array, RATE))
    assert error_deg(estimate.bearing_deg, array.compass_bearing(200.0)) < 0.5
    swapped = ArraySettings(preset="custom", capsules_m=[list(p) for p in array.capsules_m],
                            channels=[7, 6, 2, 3, 4, 5])
    moved = audio.copy()
    moved[:, [7, 6]] = audio[:, [0, 1]]
    estimate = estimate_bearing(moved, plan_doa(swapped, RATE))
    assert error_deg(estimate.bearing_deg, array.compass_bearing(200.0)) < 0.5


def test_the_response_peaks_where_pyroomacoustics_srp_phat_does():
    """The same quantity two ways: pyroomacoustics' SRP on the same frames and band."""
    array = ArraySettings(preset="uma8")
    plan = plan_doa(array, RATE)
    audio = plane_wave(array, 118.0, seed=3) + 0.3 * np.random.default_rng(4).standard_normal(
        (RATE, 7))
    ours = srp_phat(audio, plan)
    frames = audio[: (len(audio) // plan.nfft) * plan.nfft].T.reshape(7, -1, plan.nfft)
    stft = np.fft.rfft(frames * np.hanning(plan.nfft), axis=2).transpose(0, 2, 1)
    theirs = pra.doa.algorithms["SRP"](array.positions_m()[:, :2].T, RATE, plan.nfft, c=C,
                                       azimuth=np.radians(plan.azimuths_deg))
    theirs.locate_sources(stft, freq_bins=plan.bins)
    assert error_deg(plan.azimuths_deg[np.argmax(ours)],
                     float(np.degrees(theirs.azimuth_recon[0]))) <= 1.0
    assert error_deg(plan.azimuths_deg[np.argmax(ours)], 118.0) <= 1.0


def synthetic_bark(rate: int = RATE) -> np.ndarray:
    """Three harmonic barks (f0 550 Hz, 8 harmonics, sharp onset, 0.12 s decay)."""
    t = np.arange(int(0.15 * rate)) / rate
    one = sum(np.sin(2 * np.pi * 550 * k * t * (1 - 0.3 * t)) / k for k in range(1, 9))
    one = one * np.exp(-t / 0.04) * (1 - np.exp(-t / 0.002))
    gap = np.zeros(int(0.2 * rate))
    return np.concatenate([gap, one, gap, one, gap, one, gap])


def outdoors(array: ArraySettings, bearing_deg: float, distance_m: float,
             facade_absorption: float = 1.0) -> np.ndarray:
    """A bark through pyroomacoustics' image sources, (samples, capsules): open air (walls
    and sky absorb everything) but for the ground (absorbing 0.3) and, when
    ``facade_absorption`` < 1, a facade 4 m north of the array; the array 2.5 m up, the dog
    0.5 m above the ground, ``distance_m`` away at compass ``bearing_deg``."""
    centre = np.array([50.0, 96.0, 2.5])
    o = np.radians(array.orientation_deg)
    x_axis, y_axis = np.array([np.sin(o), np.cos(o)]), np.array([-np.cos(o), np.sin(o)])
    board = array.positions_m()
    capsules = np.vstack([centre[:2, None] + np.outer(x_axis, board[:, 0])
                          + np.outer(y_axis, board[:, 1]), np.full(len(board), centre[2])])
    b = np.radians(bearing_deg)
    dog = [centre[0] + distance_m * np.sin(b), centre[1] + distance_m * np.cos(b), 0.5]
    materials = pra.make_materials(ceiling=1.0, floor=0.3, east=1.0, west=1.0,
                                   north=facade_absorption, south=1.0)
    room = pra.ShoeBox([100.0, 100.0, 30.0], fs=RATE, materials=materials, max_order=2)
    room.add_microphone_array(pra.MicrophoneArray(capsules, RATE))
    room.add_source(dog, signal=synthetic_bark())
    room.simulate()
    audio = room.mic_array.signals.T
    return audio + 0.01 * audio.std() * np.random.default_rng(2).standard_normal(audio.shape)


@pytest.mark.parametrize(("bearing", "distance"), [(200.0, 25.0), (135.0, 12.0)])
def test_a_simulated_bark_outdoors_gives_its_bearing(bearing, distance):
    array = ArraySettings(preset="respeaker-4mic", orientation_deg=40.0)
    estimate = estimate_bearing(outdoors(array, bearing, distance), plan_doa(array, RATE))
    assert error_deg(estimate.bearing_deg, bearing) < 3.0


@pytest.mark.parametrize("preset", ["respeaker-4mic", "uma8"])
def test_a_facade_behind_the_array_does_not_pull_the_bearing_to_its_mirror(preset):
    """The facade (absorbing 0.1) answers 23 ms after the direct sound of a dog straight out
    in front: the barks' onsets still carry the dog's bearing."""
    array = ArraySettings(preset=preset, orientation_deg=40.0)
    estimate = estimate_bearing(outdoors(array, 180.0, 25.0, facade_absorption=0.1),
                                plan_doa(array, RATE))
    assert error_deg(estimate.bearing_deg, 180.0) < 3.0


def arriving(array: ArraySettings, signal: np.ndarray, azimuth_deg: float,
             delay_s: float = 0.0, rate: int = RATE) -> np.ndarray:
    """``signal`` as a plane wave from ``azimuth_deg`` (array frame), ``delay_s`` late, each
    capsule's copy moved by its exact delay in the frequency domain; (samples, capsules)."""
    spectrum = np.fft.rfft(signal)
    freqs = np.fft.rfftfreq(signal.size, 1.0 / rate)
    a = np.radians(azimuth_deg)
    advance = array.positions_m() @ np.array([np.cos(a), np.sin(a), 0.0]) / C - delay_s
    return np.stack([np.fft.irfft(spectrum * np.exp(2j * np.pi * freqs * t), signal.size)
                     for t in advance], axis=1)


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize(("direct", "mirror"), [(150.0, 30.0), (110.0, 70.0)])
def test_a_mirror_image_echo_20_ms_later_leaves_the_direct_bearing(preset, direct, mirror):
    """A facade's image: the barks again from the mirror direction, 20 ms later at 0.6 of the
    amplitude, at the sensor's 48 kHz. Every bin counting alike (bin_onsets off) the echo
    40 degrees away pulled the peak 3.7-5 degrees towards it and the one 120 degrees away
    left no bearing; counting each bin's new power, under a degree."""
    array = ArraySettings(preset=preset)
    bark = synthetic_bark(48_000)
    audio = arriving(array, bark, direct, rate=48_000) + 0.6 * arriving(
        array, bark, mirror, delay_s=0.02, rate=48_000)
    audio += 0.01 * audio.std() * np.random.default_rng(2).standard_normal(audio.shape)
    estimate = estimate_bearing(audio, plan_doa(array, 48_000))
    assert estimate.has_bearing
    assert error_deg(estimate.bearing_deg, array.compass_bearing(direct)) < 3.0


@pytest.mark.parametrize("preset", list(PRESETS))
def test_a_bark_over_a_steady_street_as_loud_from_elsewhere_gives_the_dog(preset):
    """Barks from 120 degrees and, as loud (0 dB over the stretch), steady noise from 200
    degrees: the bins between the harmonics and the gaps between barks are the street's, and
    counted alike they gave the street's bearing (75 degrees off); only the barks' new power
    counts now."""
    array = ArraySettings(preset=preset)
    bark = synthetic_bark()
    dog = arriving(array, bark, 120.0)
    street = plane_wave(array, 200.0, seconds=bark.size / RATE, seed=7)[: bark.size]
    street *= np.sqrt(np.mean(dog[:, 0] ** 2) / np.mean(street[:, 0] ** 2))
    estimate = estimate_bearing(dog + street, plan_doa(array, RATE))
    assert estimate.has_bearing
    assert error_deg(estimate.bearing_deg, array.compass_bearing(120.0)) < 3.0


@pytest.mark.parametrize("preset", list(PRESETS))
def test_independent_noise_on_each_capsule_gives_no_bearing(preset):
    array = ArraySettings(preset=preset)
    audio = np.random.default_rng(5).standard_normal((RATE, 8))
    estimate = estimate_bearing(audio, plan_doa(array, RATE))
    assert not estimate.has_bearing and estimate.reason == DIFFUSE
    assert estimate.uncertainty_deg is None


def test_many_uncorrelated_sources_all_round_give_no_bearing():
    array = ArraySettings(preset="uma8")
    audio = sum(plane_wave(array, azimuth, seed=int(azimuth)) for azimuth in range(0, 360, 10))
    estimate = estimate_bearing(bursts(audio), plan_doa(array, RATE))
    assert not estimate.has_bearing and estimate.reason == DIFFUSE


def test_one_microphone_gives_no_bearing():
    for array in (ArraySettings(), ArraySettings(preset="custom", capsules_m=[[0.0, 0.0]])):
        estimate = estimate_bearing(np.ones((RATE, 1)), plan_doa(array, RATE))
        assert not estimate.has_bearing and estimate.reason == NO_CAPSULES


def test_a_stretch_shorter_than_two_sub_blocks_gives_no_bearing():
    array = ArraySettings(preset="uma8")
    estimate = estimate_bearing(plane_wave(array, 10.0, seconds=0.05), plan_doa(array, RATE))
    assert not estimate.has_bearing and estimate.reason == TOO_SHORT


def test_audio_with_too_few_channels_is_refused():
    array = ArraySettings(preset="uma8")
    with pytest.raises(ValueError, match="channels"):
        estimate_bearing(np.zeros((RATE, 4)), plan_doa(array, RATE))
    with pytest.raises(ValueError, match="samples, channels"):
        estimate_bearing(np.zeros(RATE), plan_doa(array, RATE))


def test_a_rate_too_low_for_the_band_is_refused():
    with pytest.raises(ValueError, match="cannot carry"):
        plan_doa(ArraySettings(preset="uma8"), 8000)
