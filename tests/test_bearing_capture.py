"""Multichannel capture and the bearing of dog seconds on the sensor (issue 36, sensor/bearing.py):
the `[array]` section, the ring of every channel, and the frame builder on a real bark arriving
as a plane wave at a microphone array."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile

from analyzer.store.influx import health_point
from sensor.array import ArraySettings
from sensor.bearing import ChannelRing
from sensor.capture import FileSource
from sensor.config import SensorConfig, load_sensor_config
from sensor.errors import ConfigError
from sensor.frames import FrameBuilder
from sensor.node import NodeStats, measure_into_outbox, node_health
from sensor.outbox import Outbox
from sensor.wire import GATE_DOG, decode_frame
from tests.conftest import DEMO_RECORDING

C = 343.0
FULL_SCALE_DB = 120.0


def write_config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "sensor.toml"
    path.write_text('device_id = "yard-1"\n' + body)
    return path


def test_the_array_section_is_read_and_opens_every_capsules_channel(tmp_path):
    config = load_sensor_config(write_config(
        tmp_path, '[audio]\nchannel = 3\n[array]\npreset = "uma8"\norientation_deg = 135\n'))
    assert config.array.capsule_count == 7 and config.array.orientation_deg == 135.0
    assert config.input_channels == 7  # channels 0-6; channel 7 is not a capsule


def test_without_an_array_one_channel_is_opened_as_before(tmp_path):
    config = load_sensor_config(write_config(tmp_path, "[audio]\nchannel = 2\n"))
    assert not config.array.can_bear and config.input_channels == 3


def test_a_measurement_channel_outside_the_array_is_refused(tmp_path):
    path = write_config(tmp_path, '[audio]\nchannel = 7\n[array]\npreset = "respeaker-6mic"\n')
    with pytest.raises(ConfigError, match=r"'audio.channel': channel 7 is not one of the "
                       r"array's capsules \[0, 1, 2, 3, 4, 5\]"):
        load_sensor_config(path)


@pytest.mark.parametrize(("body", "message"), [
    ('[array]\npreset = "uma8"\nbearing = 10\n', r"'array.bearing' is unknown"),
    ('[array]\npreset = "respeaker"\n', r"'array.preset': 'respeaker' is not one of"),
    ('[array]\npreset = "custom"\ncapsules_m = [[0, 0], [0.05, 0], [0.1, 0]]\n',
     r"'array.capsules_m': the capsules lie on one line"),
    ('[array]\npreset = "uma8"\norientation_deg = 400\n',
     r"'array.orientation_deg': 400.0 is above the maximum 360"),
])
def test_a_bad_array_section_is_refused_with_its_key(tmp_path, body, message):
    with pytest.raises(ConfigError, match=message):
        load_sensor_config(write_config(tmp_path, body))


def test_the_ring_gives_back_exactly_the_samples_it_kept():
    ring = ChannelRing(100, 3, seconds=2.0)
    signal = np.arange(450 * 3, dtype=np.float32).reshape(450, 3)
    for start, stop in ((0, 7), (7, 130), (130, 131), (131, 450)):  # any block lengths
        ring.push(signal[start:stop])
    assert np.array_equal(ring.span(250, 450), signal[250:450])
    assert np.array_equal(ring.span(300, 360), signal[300:360])
    assert ring.span(249, 300) is None  # overwritten: 200 samples are kept
    assert ring.span(400, 451) is None  # not captured yet


def test_a_gap_in_the_capture_forgets_the_ring_and_moves_its_index_on():
    ring = ChannelRing(100, 1, seconds=1.0)
    ring.push(np.ones((80, 1)))
    ring.skip(50)
    assert ring.span(0, 80) is None
    ring.push(np.full((20, 1), 2.0))
    assert np.array_equal(ring.span(130, 150), np.full((20, 1), 2.0, np.float32))


def bark_as_plane_wave(array: ArraySettings, bearing_deg: float, seconds: tuple[float, float]
                       ) -> tuple[np.ndarray, int]:
    """The demo recording's real barks (``seconds`` of it) arriving at ``array`` as a plane
    wave from compass ``bearing_deg``: each capsule's copy delayed exactly (in the frequency
    domain), with independent noise 40 dB under the signal; (samples, channels) at the
    recording's rate, on the array's channels (others silent)."""
    audio, rate = soundfile.read(DEMO_RECORDING, dtype="float64")
    clip = audio[round(seconds[0] * rate): round(seconds[1] * rate)]
    azimuth = np.radians(array.array_azimuth(bearing_deg))
    towards = np.array([np.cos(azimuth), np.sin(azimuth), 0.0])
    advance = array.positions_m() @ towards / C
    spectrum = np.fft.rfft(clip)
    freqs = np.fft.rfftfreq(clip.size, 1.0 / rate)
    out = np.zeros((clip.size, max(array.channels) + 1))
    noise = np.random.default_rng(5).standard_normal(out.shape) * clip.std() * 0.01
    for channel, t in zip(array.channels, advance, strict=True):
        out[:, channel] = np.fft.irfft(spectrum * np.exp(2j * np.pi * freqs * t), clip.size)
    return out + noise, rate


def error_deg(a: float, b: float) -> float:
    return abs((a - b + 180.0) % 360.0 - 180.0)


UMA8 = ArraySettings(preset="uma8", orientation_deg=250.0)


def frames_of(builder: FrameBuilder, audio: np.ndarray, measured: int, block: int) -> list:
    frames = []
    for start in range(0, audio.shape[0], block):
        channels = audio[start:start + block].astype(np.float32)
        frames += builder.push(audio[start:start + block, measured], channels)
    return frames + builder.finish()


def test_each_dog_second_of_a_real_bark_carries_the_bearing_it_came_from():
    audio, rate = bark_as_plane_wave(UMA8, 300.0, (70.0, 80.0))
    builder = FrameBuilder("yard-1", rate, FULL_SCALE_DB, 0, array=UMA8)
    frames = frames_of(builder, audio, 0, rate // 10)
    dog = [f for f in frames if f.gate == GATE_DOG]
    assert len(dog) >= 4 and all(f.bearing_estimated for f in dog)
    with_bearing = [f for f in dog if f.bearing_deg is not None]
    assert len(with_bearing) >= len(dog) - 1
    for frame in with_bearing:
        assert error_deg(frame.bearing_deg, 300.0) < 3.0
        assert 2.0 <= frame.bearing_uncertainty_deg < 20.0
    others = [f for f in frames if f.gate != GATE_DOG]
    assert others and not any(f.bearing_estimated or f.bearing_deg is not None for f in others)
    assert builder.bearings is not None and builder.bearings.counters.not_in_ring == 0


def test_the_levels_and_scores_are_the_measurement_channels_as_with_one_microphone():
    audio, rate = bark_as_plane_wave(UMA8, 40.0, (70.0, 76.0))
    with_array = frames_of(FrameBuilder("yard-1", rate, FULL_SCALE_DB, 0, array=UMA8),
                           audio, 3, 1000)
    alone = frames_of(FrameBuilder("yard-1", rate, FULL_SCALE_DB, 0), audio[:, [3]], 0, 1000)
    assert len(with_array) == len(alone)
    for a, b in zip(with_array, alone, strict=True):
        assert (a.gate, a.laeq_db, a.lafmax_db) == (b.gate, b.laeq_db, b.lafmax_db)
        assert np.array_equal(a.bands_db, b.bands_db)
        assert np.array_equal(a.dog_steps, b.dog_steps)


def test_an_array_recording_at_a_rate_that_needs_resampling_is_refused(tmp_path):
    path = tmp_path / "array-22k.wav"
    soundfile.write(path, np.zeros((22050, 4)), 22050, subtype="FLOAT")
    with pytest.raises(Exception, match="read at its own rate"):
        FileSource(path, channel=0, keep_channels=True)


def test_a_builder_with_an_array_refuses_blocks_without_their_channels():
    builder = FrameBuilder("yard-1", 16000, FULL_SCALE_DB, 0, array=UMA8)
    with pytest.raises(ValueError, match="must carry every channel"):
        builder.push(np.zeros(1600))

def array_recording(tmp_path) -> tuple[FileSource, FrameBuilder]:
    """A bark from 120 degrees recorded on the UMA-8, as a file source and its frame builder."""
    audio, rate = bark_as_plane_wave(UMA8, 120.0, (70.0, 78.0))
    recording = tmp_path / "array.wav"
    soundfile.write(recording, audio, rate, subtype="FLOAT")
    source = FileSource(recording, channel=0, keep_channels=True)
    return source, FrameBuilder("yard-1", source.sample_rate, FULL_SCALE_DB, 0, array=UMA8)


def test_an_array_recording_replays_through_the_node_with_its_bearings(tmp_path):
    source, builder = array_recording(tmp_path)
    outbox = Outbox(str(tmp_path / "outbox.sqlite"), 1000)
    try:
        measure_into_outbox(source, builder, outbox, NodeStats(), threading.Event(),
                            pad_last=True)
        frames = [decode_frame(payload) for _, payload in outbox.peek(100)]
    finally:
        outbox.close()
    bearings = [f.bearing_deg for f in frames if f.gate == GATE_DOG and f.bearing_deg is not None]
    assert len(frames) == 8 and len(bearings) >= 3
    assert all(error_deg(b, 120.0) < 3.0 for b in bearings)
    assert all(f.bearing_deg is None for f in frames if f.gate != GATE_DOG)




def test_the_heartbeat_reports_the_bearing_stages_counters(tmp_path):
    source, builder = array_recording(tmp_path)
    assert builder.bearings is not None
    stats = NodeStats(bearings=builder.bearings.counters)  # as run_node sets it
    outbox = Outbox(str(tmp_path / "outbox.sqlite"), 1000)
    try:
        measure_into_outbox(source, builder, outbox, stats, threading.Event(), pad_last=True)
        frames = [decode_frame(payload) for _, payload in outbox.peek(100)]
    finally:
        outbox.close()
    dog = [f for f in frames if f.gate == GATE_DOG]
    health = node_health(SensorConfig(), stats, source)
    assert health["bearing_dog_seconds"] == len(dog) >= 3
    assert health["bearing_with_bearing"] == sum(f.bearing_deg is not None for f in dog)
    assert health["bearing_not_in_ring"] == 0
    line = health_point("yard-1", {"time_ns": 1, **health}).to_line_protocol()
    assert f"bearing_dog_seconds={len(dog)}i" in line and "bearing_not_in_ring=0i" in line


def test_a_heartbeat_without_an_array_has_no_bearing_counters(tmp_path):
    source = FileSource(DEMO_RECORDING)
    assert not [k for k in node_health(SensorConfig(), NodeStats(), source)
                if k.startswith("bearing")]
