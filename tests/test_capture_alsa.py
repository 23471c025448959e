"""The microphone path through real PortAudio capture code, fed by a virtual ALSA input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile

from sensor.outbox import Outbox
from sensor.wire import decode_frame
from tests.conftest import DEMO_RECORDING

SENSOR = Path(sys.executable).parent / "barkwatch-sensor"
SECONDS = 5


def _frames_in(outbox: Path) -> list:
    box = Outbox(outbox)
    frames = [decode_frame(payload) for _, payload in box.peek(1000)]
    box.close()
    return frames


def _config(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.toml"
    # Port 9 on loopback: nothing listens, so frames stay in the outbox for inspection.
    path.write_text(
        f'device_id = "alsa-1"\n[audio]\nsample_rate = 16000\nqueue_blocks = 100000\n'
        f'[mqtt]\nport = 9\n[outbox]\npath = "{tmp_path / name}.sqlite"\n'
    )
    return path


def test_virtual_alsa_input_gives_the_same_frames_as_the_file(tmp_path: Path) -> None:
    audio, rate = soundfile.read(DEMO_RECORDING, dtype="float32")
    excerpt = audio[70 * rate : (70 + SECONDS) * rate]
    raw = tmp_path / "input.raw"
    excerpt.astype("<f4").tofile(raw)
    wav = tmp_path / "input.wav"
    soundfile.write(wav, excerpt, rate, subtype="FLOAT")
    (tmp_path / ".asoundrc").write_text(
        "pcm.barkwatch_file {\n  type file\n  slave.pcm \"null\"\n  file \"/dev/null\"\n"
        f"  infile \"{raw}\"\n  format \"raw\"\n}}\n"
    )
    env = {**os.environ, "HOME": str(tmp_path)}
    listed = subprocess.run([SENSOR, "--list-devices"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert "barkwatch_file" in listed.stdout, listed.stderr

    captured = subprocess.run(
        [SENSOR, "run", "--config", _config(tmp_path, "mic"), "--device", "barkwatch_file",
         "--duration", str(SECONDS)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert captured.returncode == 0, captured.stderr
    replayed = subprocess.run(
        [SENSOR, "run", "--config", _config(tmp_path, "file"), "--input", wav, "--pace", "fast",
         "--no-wait"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert replayed.returncode == 0, replayed.stderr

    mic, file = _frames_in(tmp_path / "mic.sqlite"), _frames_in(tmp_path / "file.sqlite")
    assert len(mic) == len(file) == SECONDS
    for a, b in zip(mic, file, strict=True):
        assert (a.laeq_db, a.lceq_db, a.lzeq_db, a.lafmax_db) == (
            b.laeq_db, b.lceq_db, b.lzeq_db, b.lafmax_db)
        np.testing.assert_array_equal(a.bands_db, b.bands_db)
        np.testing.assert_array_equal(a.dog_steps, b.dog_steps)
        # replay of a file completes its last patches with silence; a capture stops short
        np.testing.assert_array_equal(a.embeddings, b.embeddings[: len(a.embeddings)])


def test_unknown_device_lists_the_available_ones(tmp_path: Path) -> None:
    (tmp_path / ".asoundrc").write_text(
        "pcm.barkwatch_file {\n  type file\n  slave.pcm \"null\"\n  file \"/dev/null\"\n"
        "  infile \"/dev/zero\"\n  format \"raw\"\n}\n"
    )
    result = subprocess.run(
        [SENSOR, "run", "--config", _config(tmp_path, "x"), "--device", "no-such-mic"],
        env={**os.environ, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert "'no-such-mic' matches no input device" in result.stderr
    assert "barkwatch_file" in result.stderr
