#!/usr/bin/env python3
"""Build Barkwatch's bundled example recording from permissively licensed corpus clips.

The demo replays one recording through the pipeline. This script mixes it, reproducibly,
from the training corpus (``<corpus>/train/manifest.csv`` plus 16 kHz mono FLAC clips):

* a real ambience bed (traffic, wind, birds, insects) concatenated with equal-power
  crossfades at a modest level;
* two isolated dog barks near the start;
* a few non-dog foreground sounds (other animals, a door knock) in the middle, loud enough
  that a plain energy detector would fire on them;
* a dense bout of dog barking (gaps of a few seconds, well under 60 s) lasting roughly
  60-90 s, starting more than 60 s after the last isolated bark so that a 60 s gap rule
  keeps the bout and the isolated barks apart.

Only clips whose licence allows redistribution without non-commercial or share-alike terms
are used: CC0, public domain, CC BY (any version; attribution is recorded), and MIT with a
known copyright notice. "CC0 or Pixabay Content License" clips are rejected because it is
not known which of the two applies and Pixabay's terms cannot be passed on under CC BY.

Outputs (in ``--out``): ``example.flac`` (16 kHz mono, 16-bit FLAC, peak about -3 dBFS),
``example.annotations.csv`` (``onset_s,offset_s,label``: one ``dog`` row per inserted dog
clip, trimmed to its non-silent part) and ``LICENCES.md`` (every clip, its source, licence
and attribution, and how the mix was made).

Example::

    python scripts/make_demo_recording.py --corpus /work/shared/corpus --out demo/
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from analyzer.offline.evaluate import write_annotations as write_spans

SAMPLE_RATE_HZ = 16_000
DEFAULT_SEED = 20_240_611
DEFAULT_DURATION_S = 150.0
MAX_FILE_BYTES = 3_000_000

MASTER_PEAK_DBFS = -3.0
BED_RMS_DBFS = -42.0  # bed level before the master gain (about +3 dB)
DOG_PEAK_DBFS = -6.0  # nominal dog-clip peak before jitter and master gain
DOG_JITTER_DB = 4.0  # dog clips are placed 0..DOG_JITTER_DB below the nominal peak
FOREGROUND_PEAK_DBFS = -8.0
FOREGROUND_JITTER_DB = 3.0
CROSSFADE_S = 1.5
EDGE_FADE_S = 0.005
TRIM_REL_DB = -40.0
TRIM_FRAME_S = 0.010

N_ISOLATED = 2
ISOLATED_MAX_S = 2.5  # an isolated bark is a clip no longer than this after trimming
BOUT_MIN_S = 62.0
BOUT_MAX_S = 68.0
BOUT_MIN_GAP_S = 2.0
BOUT_SEPARATION_S = 61.0  # gap between the last isolated bark and the bout, > 60 s
MIN_BOUT_CLIPS = 5
MIN_BED_SOURCE_S = 60.0

DOG_LABELS = ("dog_bark",)
BED_LABELS = ("traffic", "wind", "bird", "insects")
BED_MIN_CLIP_S = 14.0
ANIMAL_LABELS = ("cat", "rooster", "cow", "goat", "chicken")
HOUSEHOLD_LABELS = ("door_knock", "door")
N_ANIMALS = 2
N_HOUSEHOLD = 1
FOREGROUND_MIN_S = 0.5

PERMITTED_LICENCE = re.compile(r"^(CC0 1\.0|Public Domain|MIT|CC BY(?: [1-4]\.\d)?)$")
FORBIDDEN_TEXT = ("no licence", "Pixabay", "Sampling")  # anywhere in the licence text
CC_BY_URLS = {
    "CC BY 2.0": "https://creativecommons.org/licenses/by/2.0/",
    "CC BY 2.5": "https://creativecommons.org/licenses/by/2.5/",
    "CC BY 3.0": "https://creativecommons.org/licenses/by/3.0/",
    "CC BY 4.0": "https://creativecommons.org/licenses/by/4.0/",
}
# MIT needs its copyright notice reproduced; only repositories whose notice is known here
# are usable (gheja/doggy-daycare LICENSE, commit e17d9630).
MIT_NOTICES = {"gheja/doggy-daycare": "Copyright (c) 2024 Gabor Heja"}
MIT_TEXT = """\
Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE."""


class DemoBuildError(RuntimeError):
    """A corpus problem that stops the build; the message names the offending file."""


@dataclass(frozen=True)
class Clip:
    """One manifest row: a corpus clip with its provenance and licence."""

    clip_id: str
    label: str
    licence: str
    repo: str
    commit: str
    path_in_repo: str
    source_id: str
    original_class: str
    sha256: str
    path: Path
    duration_s: float

    @property
    def licence_name(self) -> str:
        """Short licence name, e.g. ``CC BY 3.0``: the text before the first parenthesis."""
        return self.licence.split(" (", 1)[0].strip()


@dataclass
class Placement:
    """A clip laid over the bed; times in seconds from the start of the mix."""

    clip: Clip
    role: str  # "dog" or "foreground"
    onset_s: float
    audio: np.ndarray  # float64 samples at SAMPLE_RATE_HZ, already level-adjusted

    @property
    def offset_s(self) -> float:
        """End time of the placed audio in seconds."""
        return self.onset_s + len(self.audio) / SAMPLE_RATE_HZ


@dataclass
class Usage:
    """How often, and in which role, a clip was used in the mix."""

    clip: Clip
    roles: list[str] = field(default_factory=list)


def progress(message: str) -> None:
    """Print one progress line to stdout immediately."""
    print(f"[make_demo_recording] {message}", flush=True)


def db_to_gain(db: float) -> float:
    """Convert a level in dB to a linear amplitude factor."""
    return float(10.0 ** (db / 20.0))


def is_permissive(clip: Clip) -> bool:
    """True when the clip's licence permits redistribution in a CC BY 4.0 mix.

    Accepts CC0 1.0, Public Domain, CC BY (any version) and MIT with a known notice;
    rejects anything non-commercial, share-alike, Sampling+, Pixabay or unstated.
    """
    name = clip.licence_name
    if any(text in clip.licence for text in FORBIDDEN_TEXT):
        return False
    if not PERMITTED_LICENCE.match(name):  # excludes NC, SA, dual "... or ..." licences
        return False
    return not (name == "MIT" and clip.repo not in MIT_NOTICES)


def load_manifest(corpus: Path) -> list[Clip]:
    """Read ``<corpus>/train/manifest.csv`` into clips, failing clearly if it is unusable."""
    manifest = corpus / "train" / "manifest.csv"
    if not manifest.is_file():
        raise DemoBuildError(f"corpus manifest not found: {manifest}")
    try:
        with manifest.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DemoBuildError(f"cannot read corpus manifest {manifest}: {exc}") from exc
    required = {"clip_id", "label", "licence", "file", "sha256", "repo", "commit"}
    if not rows or not required <= set(rows[0]):
        raise DemoBuildError(f"corpus manifest {manifest} lacks columns {sorted(required)}")
    return [_row_to_clip(row, manifest.parent) for row in rows]


def _row_to_clip(row: dict[str, str], train_dir: Path) -> Clip:
    """Turn one manifest row into a :class:`Clip`; audio paths are relative to train/."""
    return Clip(
        clip_id=row["clip_id"],
        label=row["label"],
        licence=row["licence"],
        repo=row.get("repo", ""),
        commit=row.get("commit", ""),
        path_in_repo=row.get("path_in_repo", ""),
        source_id=row.get("source_id", ""),
        original_class=row.get("original_class", ""),
        sha256=row["sha256"],
        path=train_dir / row["file"],
        duration_s=float(row.get("duration_s") or 0.0),
    )


def load_audio(clip: Clip) -> np.ndarray:
    """Load a clip as float64 samples in [-1, 1) at 16 kHz, checking rate, channels, sha256."""
    if not clip.path.is_file():
        raise DemoBuildError(f"corpus audio file missing: {clip.path}")
    try:
        pcm, rate = sf.read(str(clip.path), dtype="int16", always_2d=True)
    except (OSError, RuntimeError, sf.LibsndfileError) as exc:
        raise DemoBuildError(f"cannot read corpus audio file {clip.path}: {exc}") from exc
    if rate != SAMPLE_RATE_HZ or pcm.shape[1] != 1:
        raise DemoBuildError(
            f"{clip.path}: expected {SAMPLE_RATE_HZ} Hz mono, got {rate} Hz x {pcm.shape[1]}"
        )
    mono = np.ascontiguousarray(pcm[:, 0])
    digest = hashlib.sha256(mono.tobytes()).hexdigest()
    if clip.sha256 and digest != clip.sha256:
        raise DemoBuildError(f"{clip.path}: decoded audio sha256 {digest} != manifest")
    return mono.astype(np.float64) / 32768.0


def trim_silence(audio: np.ndarray, rel_db: float = TRIM_REL_DB) -> np.ndarray:
    """Drop leading/trailing 10 ms frames whose RMS is below ``rel_db`` dB re the loudest."""
    frame = int(round(TRIM_FRAME_S * SAMPLE_RATE_HZ))
    n_frames = max(1, len(audio) // frame)
    padded = np.zeros(n_frames * frame)
    padded[: min(len(audio), n_frames * frame)] = audio[: n_frames * frame]
    rms = np.sqrt(np.mean(padded.reshape(n_frames, frame) ** 2, axis=1))
    loud = np.flatnonzero(rms >= rms.max() * db_to_gain(rel_db))
    if loud.size == 0:
        return audio
    start, stop = loud[0] * frame, min(len(audio), (loud[-1] + 1) * frame)
    return audio[start:stop]


def edge_fade(audio: np.ndarray, fade_s: float = EDGE_FADE_S) -> np.ndarray:
    """Apply short linear fades (``fade_s`` seconds) at both ends to avoid clicks."""
    n = min(len(audio) // 2, int(round(fade_s * SAMPLE_RATE_HZ)))
    out = audio.copy()
    if n > 0:
        ramp = np.linspace(0.0, 1.0, n, endpoint=False)
        out[:n] *= ramp
        out[-n:] *= ramp[::-1]
    return out


def set_peak(audio: np.ndarray, peak_dbfs: float) -> np.ndarray:
    """Scale ``audio`` so its absolute peak sits at ``peak_dbfs`` (dB re full scale)."""
    peak = float(np.max(np.abs(audio)))
    return audio if peak == 0.0 else audio * (db_to_gain(peak_dbfs) / peak)


def set_rms(audio: np.ndarray, rms_dbfs: float) -> np.ndarray:
    """Scale ``audio`` so its RMS sits at ``rms_dbfs`` (dB re full scale)."""
    rms = float(np.sqrt(np.mean(audio**2)))
    return audio if rms == 0.0 else audio * (db_to_gain(rms_dbfs) / rms)


def crossfade_concat(parts: Sequence[np.ndarray], crossfade_s: float) -> np.ndarray:
    """Join ``parts`` end to end with equal-power crossfades of ``crossfade_s`` seconds."""
    n_fade = int(round(crossfade_s * SAMPLE_RATE_HZ))
    out = parts[0].copy()
    theta = np.linspace(0.0, np.pi / 2.0, n_fade)
    fade_out, fade_in = np.cos(theta), np.sin(theta)
    for part in parts[1:]:
        n = min(n_fade, len(out), len(part))
        head = out[: len(out) - n]
        overlap = out[len(out) - n :] * fade_out[:n] + part[:n] * fade_in[:n]
        out = np.concatenate([head, overlap, part[n:]])
    return out


def select_pool(clips: Sequence[Clip], labels: Sequence[str], min_s: float) -> list[Clip]:
    """Permissive clips with one of ``labels`` and at least ``min_s`` seconds, by clip_id."""
    pool = [c for c in clips if c.label in labels and c.duration_s >= min_s and is_permissive(c)]
    return sorted(pool, key=lambda c: c.clip_id)


def build_bed(
    pool: Sequence[Clip], duration_s: float, rng: np.random.Generator
) -> tuple[np.ndarray, list[Clip]]:
    """Loop the (shuffled) ambience clips, each at ``BED_RMS_DBFS``, to ``duration_s``."""
    n_target = int(round(duration_s * SAMPLE_RATE_HZ))
    order = [pool[i] for i in rng.permutation(len(pool))]
    parts: list[np.ndarray] = []
    used: list[Clip] = []
    total = 0
    fade = int(round(CROSSFADE_S * SAMPLE_RATE_HZ))
    while total < n_target + fade:
        clip = order[len(parts) % len(order)]
        audio = load_audio(clip)
        audio = audio - float(np.mean(audio))
        parts.append(set_rms(audio, BED_RMS_DBFS))
        used.append(clip)
        total += len(audio) - (fade if len(parts) > 1 else 0)
        progress(f"bed: + {clip.clip_id} ({len(audio) / SAMPLE_RATE_HZ:.1f} s)")
    bed = crossfade_concat(parts, CROSSFADE_S)[:n_target]
    return bed, used


def prepare_event(
    clip: Clip, peak_dbfs: float, jitter_db: float, rng: np.random.Generator
) -> np.ndarray:
    """Load, trim, fade and level a foreground clip to ``peak_dbfs`` minus 0..jitter dB."""
    audio = trim_silence(load_audio(clip))
    audio = edge_fade(audio - float(np.mean(audio)))
    return set_peak(audio, peak_dbfs - float(rng.uniform(0.0, jitter_db)))


def split_dog_clips(
    dog_pool: Sequence[Clip], rng: np.random.Generator
) -> tuple[list[tuple[Clip, np.ndarray]], list[tuple[Clip, np.ndarray]]]:
    """Prepare every dog clip; pick ``N_ISOLATED`` short ones as isolated barks, rest = bout."""
    prepared = [(c, prepare_event(c, DOG_PEAK_DBFS, DOG_JITTER_DB, rng)) for c in dog_pool]
    short = [i for i, (_, a) in enumerate(prepared) if len(a) <= ISOLATED_MAX_S * SAMPLE_RATE_HZ]
    if len(short) < N_ISOLATED:
        raise DemoBuildError(
            f"need {N_ISOLATED} permissive dog clips of <= {ISOLATED_MAX_S} s, found {len(short)}"
        )
    chosen = sorted(int(i) for i in rng.choice(short, size=N_ISOLATED, replace=False))
    isolated = [prepared[i] for i in chosen]
    bout = [prepared[i] for i in rng.permutation(len(prepared)) if i not in chosen]
    if len(bout) < MIN_BOUT_CLIPS:
        raise DemoBuildError(
            f"need >= {MIN_BOUT_CLIPS} permissive dog clips for the bout, found {len(bout)}"
        )
    return isolated, bout


def place_isolated(
    isolated: Sequence[tuple[Clip, np.ndarray]], rng: np.random.Generator
) -> list[Placement]:
    """Place the isolated barks near the start, 6-9 s apart (times in seconds)."""
    placements: list[Placement] = []
    t = float(rng.uniform(1.5, 3.0))
    for clip, audio in isolated:
        placements.append(Placement(clip, "dog", t, audio))
        t = placements[-1].offset_s + float(rng.uniform(6.0, 9.0))
    return placements


def place_bout(
    bout: Sequence[tuple[Clip, np.ndarray]], start_s: float, rng: np.random.Generator
) -> list[Placement]:
    """Place the bout clips from ``start_s`` with gaps chosen so it spans 62-68 s."""
    busy_s = sum(len(a) for _, a in bout) / SAMPLE_RATE_HZ
    target_s = float(rng.uniform(BOUT_MIN_S, BOUT_MAX_S))
    n_gaps = len(bout) - 1
    spare_s = target_s - busy_s - n_gaps * BOUT_MIN_GAP_S
    if spare_s < 0:
        raise DemoBuildError(f"dog clips ({busy_s:.1f} s) do not fit a {target_s:.1f} s bout")
    weights = rng.uniform(0.5, 1.5, size=n_gaps)
    gaps = BOUT_MIN_GAP_S + spare_s * weights / weights.sum()
    placements: list[Placement] = []
    t = start_s
    for k, (clip, audio) in enumerate(bout):
        placements.append(Placement(clip, "dog", t, audio))
        if k < n_gaps:
            t = placements[-1].offset_s + float(gaps[k])
    return placements


def place_foreground(
    clips: Sequence[Clip], window: tuple[float, float], rng: np.random.Generator
) -> list[Placement]:
    """Spread the non-dog clips evenly (with jitter) over ``window`` = (start_s, end_s)."""
    start_s, end_s = window
    slot_s = (end_s - start_s) / len(clips)
    placements: list[Placement] = []
    for k, clip in enumerate(clips):
        audio = prepare_event(clip, FOREGROUND_PEAK_DBFS, FOREGROUND_JITTER_DB, rng)
        latest = slot_s - len(audio) / SAMPLE_RATE_HZ - 1.0
        onset = start_s + k * slot_s + float(rng.uniform(1.0, max(1.0, latest)))
        placements.append(Placement(clip, "foreground", onset, audio))
    return placements


def choose_foreground(clips: Sequence[Clip], rng: np.random.Generator) -> list[Clip]:
    """Pick ``N_ANIMALS`` other-animal clips (distinct labels) and ``N_HOUSEHOLD`` household."""
    chosen: list[Clip] = []
    for labels, count, kind in (
        (ANIMAL_LABELS, N_ANIMALS, "other-animal"),
        (HOUSEHOLD_LABELS, N_HOUSEHOLD, "household"),
    ):
        pool = select_pool(clips, labels, FOREGROUND_MIN_S)
        by_label: dict[str, list[Clip]] = {}
        for clip in pool:
            by_label.setdefault(clip.label, []).append(clip)
        if len(by_label) < count:
            raise DemoBuildError(f"need {count} permissive {kind} labels, found {len(by_label)}")
        for label in rng.choice(sorted(by_label), size=count, replace=False):
            options = by_label[str(label)]
            chosen.append(options[int(rng.integers(len(options)))])
    order = rng.permutation(len(chosen))
    return [chosen[i] for i in order]


def mix(bed: np.ndarray, placements: Sequence[Placement]) -> np.ndarray:
    """Add every placement onto the bed; returns a new float64 array of the bed's length."""
    out = bed.copy()
    for p in placements:
        start = int(round(p.onset_s * SAMPLE_RATE_HZ))
        stop = start + len(p.audio)
        if stop > len(out):
            raise DemoBuildError(f"{p.clip.clip_id} at {p.onset_s:.2f} s runs past the end")
        out[start:stop] += p.audio
    return out


def master(audio: np.ndarray) -> np.ndarray:
    """Peak-normalise to ``MASTER_PEAK_DBFS`` and quantise to int16 (no clipping possible)."""
    scaled = set_peak(audio, MASTER_PEAK_DBFS)
    return np.round(scaled * 32767.0).astype(np.int16)


def write_flac(path: Path, pcm: np.ndarray) -> None:
    """Write 16 kHz mono 16-bit FLAC at the strongest compression libsndfile offers."""
    try:
        sf.write(
            str(path), pcm, SAMPLE_RATE_HZ, format="FLAC", subtype="PCM_16", compression_level=1.0
        )
    except TypeError:  # soundfile < 0.13 has no compression_level
        sf.write(str(path), pcm, SAMPLE_RATE_HZ, format="FLAC", subtype="PCM_16")


def write_annotations(path: Path, placements: Sequence[Placement]) -> list[tuple[float, float]]:
    """Write ``onset_s,offset_s,label`` rows (seconds, 3 decimals) for the dog placements."""
    spans = sorted((p.onset_s, p.offset_s) for p in placements if p.role == "dog")
    write_spans(path, spans)
    return spans


def parse_credit(clip: Clip) -> tuple[str, str, str, str]:
    """(work, author, url, upstream edits) parsed from the manifest's licence text.

    The manifest's licence column reads e.g. ``CC BY 3.0 (blimp66; source URL; per ...)``,
    ``CC0 1.0 (Freesound 252909 by kijjaz; cut by gheja/doggy-daycare)`` or
    ``Public Domain (SoundBible 2083 'Title' by Author)``. Unknown parts come back as ''.
    """
    inner = clip.licence[len(clip.licence_name) :].strip()
    inner = inner[1:-1] if inner.startswith("(") and inner.endswith(")") else inner
    fs_url = ""
    if clip.source_id.startswith("freesound:"):
        fs_url = f"https://freesound.org/s/{clip.source_id.split(':', 1)[1]}/"
    if m := re.fullmatch(r"Freesound (\d+) by (.+?)(?:; (cut by .+)|, (edited by .+))?", inner):
        url = f"https://freesound.org/s/{m.group(1)}/"
        return f"Freesound sound {m.group(1)}", m.group(2), url, m.group(3) or m.group(4) or ""
    if m := re.fullmatch(r"(.+); source (\S+); (per .+)", inner):
        work = f"Freesound sound {clip.source_id.split(':', 1)[1]}" if fs_url else "recording"
        return work, m.group(1), m.group(2), f"as distributed by {clip.repo}"
    if m := re.fullmatch(r"SoundBible (\d+) '(.+)' by (.+)", inner):
        return f"'{m.group(2)}'", m.group(3), f"https://soundbible.com/{m.group(1)}", ""
    return "recording", inner, fs_url, ""


def attribution(clip: Clip) -> str:
    """Attribution text for one clip (required for CC BY and MIT, given as credit otherwise)."""
    name = clip.licence_name
    changes = "trimmed, level-adjusted and mixed into demo/example.flac"
    work, author, url, edits = parse_credit(clip)
    if name == "MIT":
        return f"{author}; {MIT_NOTICES[clip.repo]}; MIT License (full text below); {changes}"
    text = f"{work} by {author}" + (f" ({url})" if url else "") + (f", {edits}" if edits else "")
    if name.startswith("CC BY"):
        licence_url = CC_BY_URLS.get(name, "version not stated upstream")
        return f"{text}; licensed under {name} ({licence_url}); {changes}"
    return f"credit (not required under {name}): {text}; {changes}"


def source_text(clip: Clip) -> str:
    """Where the clip came from: repository, commit, path, plus Freesound id if known."""
    text = f"{clip.repo}@{clip.commit[:12]}:{clip.path_in_repo}"
    return f"{text} ({clip.source_id})" if clip.source_id else text


def mix_licence(usages: Sequence[Usage]) -> str:
    """CC0 1.0 when every input is CC0 or public domain, otherwise CC BY 4.0."""
    names = {u.clip.licence_name for u in usages}
    return "CC0 1.0" if names <= {"CC0 1.0", "Public Domain"} else "CC BY 4.0"


def cell(text: str) -> str:
    """Escape text for one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def write_licences(path: Path, usages: Sequence[Usage], command: str, seed: int) -> None:
    """Write LICENCES.md: the mix's licence, how it was made, and one table row per clip."""
    licence = mix_licence(usages)
    lines = [
        "# Licences for `demo/example.flac`",
        "",
        "`example.flac` is a synthetic mix of real field recordings taken from the Barkwatch",
        "training corpus (`train/manifest.csv`). It was made by",
        "",
        "```",
        command,
        "```",
        "",
        f"(seed {seed}): permissive ambience clips were concatenated with "
        f"{CROSSFADE_S:g} s equal-power crossfades",
        "as a background bed; permissive dog-bark clips (trimmed below "
        f"{TRIM_REL_DB:g} dB re their peak) and a few",
        "non-dog sounds were added on top; the sum was peak-normalised to "
        f"{MASTER_PEAK_DBFS:g} dBFS and written as 16 kHz",
        "mono 16-bit FLAC. `example.annotations.csv` gives the span of every inserted dog clip.",
        "",
        "Only clips under CC0 1.0, public domain, CC BY (any version) or MIT were used. Clips",
        'under CC BY-NC*, CC BY-SA, Sampling+, with no licence stated, or "CC0 or Pixabay',
        'Content License" (the per-file licence is unknown) were excluded.',
        "",
        "## Licence of the mix",
        "",
    ]
    if licence == "CC0 1.0":
        lines.append("Every input is CC0 or public domain; the mix is offered under CC0 1.0.")
    else:
        lines += [
            "The mix is offered under CC BY 4.0 (https://creativecommons.org/licenses/by/4.0/)",
            "with the attributions below, which must be kept with it. Each input keeps its own",
            "licence; the MIT-licensed recordings additionally carry the MIT notice below.",
        ]
    lines += [
        "",
        "## Clips used",
        "",
        "| clip_id | role | uses | licence | source | attribution |",
        "|---|---|---|---|---|---|",
    ]
    for u in usages:
        c = u.clip
        roles = ", ".join(sorted(set(u.roles)))
        lines.append(
            f"| {cell(c.clip_id)} | {roles} | {len(u.roles)} | {cell(c.licence_name)} "
            f"| {cell(source_text(c))} | {cell(attribution(c))} |"
        )
    lines += _mit_section(usages)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _mit_section(usages: Sequence[Usage]) -> list[str]:
    """Markdown lines reproducing the MIT notice for every MIT repository used."""
    repos = sorted({u.clip.repo for u in usages if u.clip.licence_name == "MIT"})
    lines: list[str] = []
    for repo in repos:
        lines += [
            "",
            f"## MIT License ({repo})",
            "",
            "```",
            "MIT License",
            "",
            MIT_NOTICES[repo],
            "",
            MIT_TEXT,
            "```",
        ]
    return lines


def collect_usages(bed_clips: Sequence[Clip], placements: Sequence[Placement]) -> list[Usage]:
    """Group every use of every clip, in order of first use."""
    usages: dict[str, Usage] = {}
    for clip, role in [(c, "bed") for c in bed_clips] + [
        (p.clip, p.role) for p in sorted(placements, key=lambda p: p.onset_s)
    ]:
        usages.setdefault(clip.clip_id, Usage(clip)).roles.append(role)
    return list(usages.values())


def check_output(path: Path, duration_s: float) -> None:
    """Read the FLAC back and report rate, channels, duration, peak and size."""
    audio, rate = sf.read(str(path), dtype="float64", always_2d=True)
    size = path.stat().st_size
    peak_db = 20.0 * np.log10(np.max(np.abs(audio)))
    progress(
        f"wrote {path}: {rate} Hz, {audio.shape[1]} ch, {len(audio) / rate:.2f} s, "
        f"peak {peak_db:.2f} dBFS, {size / 1e6:.2f} MB"
    )
    if rate != SAMPLE_RATE_HZ or audio.shape[1] != 1:
        raise DemoBuildError(f"{path}: read back as {rate} Hz x {audio.shape[1]} channels")
    if abs(len(audio) / rate - duration_s) > 0.01:
        raise DemoBuildError(f"{path}: duration {len(audio) / rate:.2f} s != {duration_s} s")
    if size > MAX_FILE_BYTES:
        raise DemoBuildError(f"{path}: {size} bytes exceeds {MAX_FILE_BYTES}; lower the bed")


def build(corpus: Path, out: Path, seed: int, duration_s: float, command: str) -> None:
    """Select clips, mix, and write the three demo files into ``out``."""
    rng = np.random.default_rng(seed)
    clips = load_manifest(corpus)
    permissive = [c for c in clips if is_permissive(c)]
    progress(f"manifest: {len(clips)} clips, {len(permissive)} with a permissive licence")

    bed_pool = select_pool(clips, BED_LABELS, BED_MIN_CLIP_S)
    bed_source_s = sum(c.duration_s for c in bed_pool)
    if bed_source_s < MIN_BED_SOURCE_S:
        raise DemoBuildError(f"only {bed_source_s:.0f} s of permissive ambience in the manifest")
    dog_pool = select_pool(clips, DOG_LABELS, 0.0)
    if len(dog_pool) < N_ISOLATED + MIN_BOUT_CLIPS:
        raise DemoBuildError(
            f"only {len(dog_pool)} permissive dog-bark clips in the manifest, "
            f"need {N_ISOLATED + MIN_BOUT_CLIPS}"
        )
    progress(f"pools: {len(bed_pool)} ambience clips, {len(dog_pool)} dog-bark clips")

    bed, bed_clips = build_bed(bed_pool, duration_s, rng)
    isolated, bout = split_dog_clips(dog_pool, rng)
    placements = place_isolated(isolated, rng)
    bout_start = placements[-1].offset_s + BOUT_SEPARATION_S + float(rng.uniform(0.0, 2.0))
    bout_placed = place_bout(bout, bout_start, rng)
    if bout_placed[-1].offset_s > duration_s - 2.0:
        raise DemoBuildError(f"bout ends at {bout_placed[-1].offset_s:.1f} s, past the mix")
    foreground = choose_foreground(clips, rng)
    window = (placements[-1].offset_s + 5.0, bout_start - 3.0)
    placements += place_foreground(foreground, window, rng) + bout_placed
    for p in sorted(placements, key=lambda p: p.onset_s):
        progress(f"{p.role:10s} {p.onset_s:7.2f}-{p.offset_s:7.2f} s  {p.clip.clip_id}")

    out.mkdir(parents=True, exist_ok=True)
    flac = out / "example.flac"
    write_flac(flac, master(mix(bed, placements)))
    check_output(flac, duration_s)
    spans = write_annotations(out / "example.annotations.csv", placements)
    progress(
        f"{len(spans)} dog spans; bout {bout_placed[0].onset_s:.1f}-"
        f"{bout_placed[-1].offset_s:.1f} s ({len(bout_placed)} clips)"
    )
    usages = collect_usages(bed_clips, placements)
    write_licences(out / "LICENCES.md", usages, command, seed)
    progress(f"wrote {out / 'LICENCES.md'} ({len(usages)} clips, mix {mix_licence(usages)})")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus",
        type=Path,
        required=True,
        help="corpus root holding train/manifest.csv (e.g. /work/shared/corpus)",
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder, e.g. demo/")
    parser.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        help=f"random seed for clip choice and placement (default {DEFAULT_SEED})",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=DEFAULT_DURATION_S,
        help=f"mix length in seconds (default {DEFAULT_DURATION_S:g})",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: build the demo, exit 1 with a clear message on corpus problems."""
    args = parse_args(argv)
    command = f"python scripts/make_demo_recording.py --corpus {args.corpus} --out {args.out}/"
    if args.seed != DEFAULT_SEED:
        command += f" --seed {args.seed}"
    if args.duration != DEFAULT_DURATION_S:
        command += f" --duration {args.duration:g}"
    try:
        build(args.corpus, args.out, args.seed, args.duration, command)
    except DemoBuildError as exc:
        print(f"make_demo_recording: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
