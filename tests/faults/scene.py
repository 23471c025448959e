"""Audio with a violation in it, for fault runs: demo scenes placed one after another."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile

from analyzer.cli.demo_scene import SCENE_SEED, load_material, make_scene


def write_violation_audio(path: Path, scenes: int, barking_s: float, lead_s: float,
                          tail_s: float, seed: int = SCENE_SEED) -> float:
    """Write ``scenes`` demo scenes (each: ``lead_s`` of background, barks at gaps under the
    continuity gap for ``barking_s``, ``tail_s`` of background; seeded) one after another as a
    float WAV; return its length in s, rounded down to whole seconds (the file is cut there, so
    every frame is a whole second and a replay in pieces measures the same frames)."""
    audio, rate, spans = load_material()
    pieces = [make_scene(audio, rate, spans, seed=seed + i, lead_s=lead_s,
                         barking_s=barking_s, tail_s=tail_s).samples for i in range(scenes)]
    samples = np.concatenate(pieces)
    seconds = len(samples) // rate
    soundfile.write(path, samples[: seconds * rate], rate, subtype="FLOAT")
    return float(seconds)


def write_from_second(source: Path, path: Path, first_s: int, seconds: int | None = None) -> Path:
    """Write ``source`` from whole second ``first_s`` on (``seconds`` long, or to its end):
    what a sensor restarted at that second goes on to capture."""
    audio, rate = soundfile.read(source, dtype="float32")
    end = None if seconds is None else (first_s + seconds) * rate
    soundfile.write(path, audio[first_s * rate : end], rate, subtype="FLOAT")
    return path
