"""Offline analysis measures on a thread of its own and runs the CNN and YAMNet on another
(issue 24: an hour of 48 kHz audio in under 30 s); what it measures must be exactly what the
single-threaded sensor measures.

Known answer: 30 s of the bundled demo recording with barks in it, upsampled to 48 kHz (the
resampler to YAMNet's 16 kHz then works), measured both ways: the same frames byte for byte on
the wire, so the same events, levels and findings.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile
import soxr
from threadpoolctl import threadpool_info

from analyzer.offline.analysis import analyze_file, measured_frames
from sensor.capture import FileSource
from sensor.frames import FrameBuilder
from sensor.scoring import SensorNetworks
from sensor.wire import encode_frame
from tests.conftest import DEMO_RECORDING

FULL_SCALE_DB = 120.0


@pytest.fixture(scope="module")
def barks_48k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100-130 s of the demo recording (barks at 102-106, 113-118 and 123-130 s) at 48 kHz,
    16-bit FLAC."""
    audio, rate = soundfile.read(DEMO_RECORDING, dtype="float64")
    excerpt = soxr.resample(audio[100 * rate : 130 * rate], rate, 48_000)
    path = tmp_path_factory.mktemp("threads") / "barks48k.flac"
    soundfile.write(path, np.clip(excerpt, -1, 1), 48_000, subtype="PCM_16")
    return path


def single_threaded_wire(path: Path) -> list[bytes]:
    """The sensor's own way: one thread, every second measured and scored in turn."""
    source = FileSource(path, block_s=1.0)
    builder = FrameBuilder("offline", source.sample_rate, FULL_SCALE_DB, start_ns=0,
                           networks=SensorNetworks(source.sample_rate))  # fmt: skip
    frames = []
    for block in source:
        assert block.samples is not None
        frames += builder.push(block.samples)
    return [encode_frame(f) for f in frames + builder.finish()]


def test_offline_frames_with_yamnet_on_a_thread_equal_the_sensors_byte_for_byte(
    barks_48k: Path,
) -> None:
    threaded = [encode_frame(f) for f in measured_frames(FileSource(barks_48k), FULL_SCALE_DB)]
    assert len(threaded) == 30
    assert threaded == single_threaded_wire(barks_48k)


def test_the_analysis_of_a_clip_is_the_same_on_every_run(barks_48k: Path) -> None:
    first = analyze_file(barks_48k, full_scale_db=FULL_SCALE_DB)
    assert len(first["events"]) >= 2  # the barks were found
    assert analyze_file(barks_48k, full_scale_db=FULL_SCALE_DB) == first


def test_networks_begun_on_one_second_and_asked_for_another_are_refused() -> None:
    networks = SensorNetworks(48_000, worker_thread=True)
    try:
        networks.begin(np.zeros(48_000), np.zeros((50, 64)))
        with pytest.raises(RuntimeError, match="other than the one begun"):
            networks.process(np.zeros(48_000), np.zeros((50, 64)))
    finally:
        networks.close()


def test_a_caller_that_stops_early_stops_the_measuring_thread(barks_48k: Path) -> None:
    frames = measured_frames(FileSource(barks_48k), FULL_SCALE_DB)
    next(frames)
    frames.close()
    assert not [t.name for t in threading.enumerate()
                if t.name == "measure" or t.name.startswith("networks")]  # fmt: skip


def test_blas_runs_one_thread_while_a_file_is_measured_and_as_before_after(
    barks_48k: Path,
) -> None:
    # OpenBLAS's threads spin while they wait and took the cores from the measuring and
    # network threads (an hour: 37 s wall, 68 s CPU; with one BLAS thread 29 s and 42 s).
    def blas_threads() -> list[int]:
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    before = blas_threads()
    frames = measured_frames(FileSource(barks_48k), FULL_SCALE_DB)
    next(frames)
    assert blas_threads() and all(n == 1 for n in blas_threads())
    frames.close()
    assert blas_threads() == before
