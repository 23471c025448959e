"""The training corpus: manifests of clips, the seeded split of recordings, reading the audio.

A corpus is a folder with ``manifest.csv`` (columns ``clip_id``, ``binary`` = dog / not_dog,
``group`` = the original recording, ``file`` relative to the folder; ``label``,
``original_class``, ``duration_s`` and ``licence`` are used where present) and the audio files
(any rate; mono or mixed down). A city can assemble one from its own recordings.
"""

from __future__ import annotations

import collections
import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
import soxr

RATE = 16000  # Hz: the sensor's sample rate; every clip is resampled to it


@dataclass(frozen=True)
class Clip:
    clip_id: str
    path: str
    is_dog: bool
    label: str
    group: str
    duration_s: float
    extra: bool = False  # from an extra corpus (its own number of copies)
    licence: str = ""


def read_manifest(corpus: Path, extra: bool = False) -> list[Clip]:
    """Clips of the manifest; dog snoring (not a vocalization) is left out."""
    clips = []
    with open(corpus / "manifest.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if "snoring" in row.get("original_class", ""):
                continue
            clips.append(
                Clip(
                    clip_id=row["clip_id"],
                    path=str(corpus / row["file"]),
                    is_dog=row["binary"] == "dog",
                    label=row.get("label", row["binary"]),
                    group=row["group"],
                    duration_s=float(row.get("duration_s") or 0.0),
                    extra=extra,
                    licence=row.get("licence", ""),
                )
            )
    return clips


def read_manifests(corpus: Path, extra_corpora: list[Path] | tuple[Path, ...] = ()) -> list[Clip]:
    """Clips of the main corpus, then of each extra one; a clip id may appear only once."""
    clips = read_manifest(corpus)
    for folder in extra_corpora:
        clips += read_manifest(folder, extra=True)
    seen: set[str] = set()
    for clip in clips:
        if clip.clip_id in seen:
            raise ValueError(f"clip id {clip.clip_id!r} appears twice in the corpora")
        seen.add(clip.clip_id)
    return clips


def unit_hash(key: str) -> float:
    """A stable number in [0, 1) drawn from a text (the same on every machine and run)."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_validation_group(group: str, seed: int, fraction: float) -> bool:
    """Seeded, stable assignment of a recording to validation."""
    return unit_hash(f"{seed}:{group}") < fraction


def load_audio(path: str) -> np.ndarray:
    """The file's samples, mixed down to mono and resampled to ``RATE`` (float64)."""
    audio, rate = soundfile.read(path, dtype="float64", always_2d=True)
    mono = audio.mean(axis=1)
    if rate != RATE:
        mono = soxr.resample(mono, rate, RATE)
    return np.asarray(mono, dtype=np.float64)


def licence_counts(clips: list[Clip]) -> dict[str, int]:
    """Clips per licence family (the text before the first parenthesis)."""
    counts = collections.Counter(clip.licence.split(" (")[0].strip() or "unknown" for clip in clips)
    return dict(counts.most_common())
