"""The training set: classifier examples made from a corpus, written to one ``.npz``.

    barkwatch-train trainset CORPUS_DIR OUT.npz [--seed 1] [--jobs 2]
        [--extra-corpus DIR --extra-copies N]

CORPUS_DIR holds ``manifest.csv`` and the audio (:mod:`training.corpus`). A city can run it on
its own recordings.

Every example is a *stream*: one source clip, augmented toward deployment conditions (small
pitch/time change by resampling, distance low-pass for air absorption, synthetic
reverberation, a random spectral tilt and resonance), placed into a real background
recording (the manifest's ambience clips) at an SNR of -5..+20 dB with background before and
after it, scaled to a random level over +-20 dB around -30 dBFS, and then measured by the
sensor's own code (``sensor.frames.mel_rows_from_samples`` at a nominal full scale of 100 dB
SPL, rounded to float16 as the sensor's CNN reads them). Options: a fraction of the clip
streams may start with the clip itself (``--no-lead-in-fraction``: files cut tight around a
sound), and labels with few clips (birds and other animals, voices, growls, howls, whines) may
get more copies than the common ones (``--rare-copy-factor``). Extra negatives:
background-only streams and synthetic tones, sweeps, beeps and noise bursts; optionally
(``--tonal-negatives N``) N more training streams of narrow-band sounds: bird-like chirp
trains, alarm beeps, a whistle's glide and the same tones. More folders with
their own manifest (``--extra-corpus``, repeatable; for example the non-dog clips of part of the
Debian corpus, written by ``scripts/prepare_debian_dev.py --train-dir``) join the main one, with
``--extra-copies`` augmented copies per clip; their groups are split like any other.

Per-step labels come from the clean source's energy (high-passed at 150 Hz, per 20 ms): 1 (dog)
where a dog clip stands 8 dB above its own floor (20th percentile), within 30 dB of its peak,
and not more than 6 dB under the background; -1 (ignore) in the rest of a dog clip (its own
noise, quiet tails, masked parts) and within 40 ms of a labelled boundary; 0 elsewhere (the
background around the clip, every non-dog stream).

Groups are split into training and validation (``--val-fraction``) before anything is mixed,
and validation streams use only validation sources *and* backgrounds: nothing of a
validation recording reaches training. The output ``.npz`` holds the mel rows of all streams
(float16), per-step labels, and per-stream metadata; no pickled objects.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import signal

from sensor.frames import mel_rows_from_samples
from training.augment import (
    augment_source,
    background_segment,
    synthetic_negative,
    tonal_negative,
)
from training.corpus import RATE, Clip, is_validation_group, load_audio, read_manifests

log = logging.getLogger(__name__)

HOP = 320  # 20 ms at 16 kHz: the sensor's mel hop
FULL_SCALE_DB = 100.0  # nominal calibration of the uncalibrated corpus
SNR_RANGE_DB = (-5.0, 20.0)
LEVEL_RANGE_DBFS = (-50.0, -10.0)  # mixture RMS: about -30 dBFS +- 20 dB
ACTIVE_BELOW_PEAK_DB = 30.0
PROMINENT_DB = 8.0  # a bark stands this far above its clip's own floor
MASKED_BELOW_BACKGROUND_DB = 6.0
# Options (off by default: the bundled model was trained without them; docs/MODEL_HISTORY.md has the
# measured effect). Rare labels may get more augmented copies, up to ``rare_copy_factor`` times
# the base number, so that the few birds, other animals, voices and non-bark dog sounds weigh
# more against the many UrbanSound8K clips: copies = base x REFERENCE_CLIPS / clips with that
# label, within limits. A fraction of clip streams may start with the clip itself (no lead-in:
# files cut tight around a sound).
REFERENCE_CLIPS = {True: 40, False: 35}  # dog, not dog
RARE_COPY_FACTOR = 1
NO_LEAD_IN_FRACTION = 0.0
# Labels of not-dog clips that are steady backgrounds worth mixing under other sounds.
BACKGROUND_LABELS = {
    "air_conditioner", "crowd_babble", "engine_idling", "fire", "household_appliance",
    "indoor_ambience", "insects", "nature_ambience", "rain", "room_tone", "sea_waves",
    "traffic", "train", "water", "wind", "bird", "construction", "airplane", "radio_static",
    "street_music", "children_playing", "music",
}  # fmt: skip


def _power_db(x: np.ndarray) -> np.ndarray:
    n = x.size // HOP
    p = np.mean(x[: n * HOP].reshape(n, HOP) ** 2, axis=1)
    return 10.0 * np.log10(p + 1e-20)


def prominent_steps(src_db: np.ndarray, region: np.ndarray) -> np.ndarray:
    """Steps of a clip that stand out of the clip's own floor (its 20th percentile) by
    ``PROMINENT_DB`` and lie within ``ACTIVE_BELOW_PEAK_DB`` of its peak; a clip with no such
    step (a steady sound) counts as active throughout."""
    active = np.zeros(src_db.size, dtype=bool)
    if not region.any():
        return active
    inside = src_db[region]
    floor, peak = float(np.percentile(inside, 20)), float(inside.max())
    found = (inside >= floor + PROMINENT_DB) & (inside >= peak - ACTIVE_BELOW_PEAK_DB)
    active[region] = found if found.any() else True
    return active


def _highpass(x: np.ndarray) -> np.ndarray:
    sos = signal.butter(2, 150.0, "highpass", fs=RATE, output="sos")
    return np.asarray(signal.sosfilt(sos, x))


@dataclass(frozen=True)
class Task:
    seed: int
    kind: str  # "clip", "background", "synthetic", "tonal"
    clip_index: int
    split: str
    no_lead_in_fraction: float = 0.0


def _pools(clips: list[Clip], seed: int, fraction: float) -> dict[str, list[int]]:
    pools: dict[str, list[int]] = {"train": [], "val": []}
    for i, clip in enumerate(clips):
        if not clip.is_dog and clip.label in BACKGROUND_LABELS and clip.duration_s >= 4.0:
            split = "val" if is_validation_group(clip.group, seed, fraction) else "train"
            pools[split].append(i)
    return pools


_STATE: dict[str, object] = {}


def _init_worker(clips: list[Clip], pools: dict[str, list[int]]) -> None:
    _STATE["clips"] = clips
    _STATE["backgrounds"] = {
        split: [load_audio(clips[i].path) for i in indices] for split, indices in pools.items()
    }


def scaled_to_dbfs(audio: np.ndarray, level_dbfs: float) -> np.ndarray:
    """The signal scaled to an RMS of ``level_dbfs`` and clipped to full scale."""
    rms = math.sqrt(np.mean(audio**2) + 1e-20)
    return np.clip(audio * 10 ** (level_dbfs / 20) / rms, -1.0, 1.0)


def mel_of_audio(audio: np.ndarray, full_scale_db: float = FULL_SCALE_DB) -> np.ndarray:
    """The sensor's mel rows of a signal, exactly as its CNN reads them (float16; since wire v2
    they stay on the sensor)."""
    return mel_rows_from_samples(audio, RATE, full_scale_db)


def make_stream(task: Task) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """One augmented example: mel rows (float16), per-step labels, metadata."""
    rng = np.random.default_rng(task.seed)
    clips: list[Clip] = _STATE["clips"]  # type: ignore[assignment]
    backgrounds: list[np.ndarray] = _STATE["backgrounds"][task.split]  # type: ignore[index]
    is_dog = False
    clip_id, group, label = task.kind, task.kind, task.kind
    if task.kind == "clip":
        clip = clips[task.clip_index]
        source = augment_source(rng, load_audio(clip.path))
        is_dog, clip_id, group, label = clip.is_dog, clip.clip_id, clip.group, clip.label
    elif task.kind == "synthetic":
        source = synthetic_negative(rng)
    elif task.kind == "tonal":
        source = tonal_negative(rng)
    else:
        source = np.zeros(int(rng.uniform(3.0, 10.0) * RATE))
    pad_before = int(rng.uniform(0.3, 2.5) * RATE)
    # No draw when the option is off: the default set keeps its random stream bit for bit.
    if task.kind == "clip" and task.no_lead_in_fraction > 0 and (
        rng.random() < task.no_lead_in_fraction
    ):
        pad_before = 0
    pad_after = int(rng.uniform(0.3, 2.0) * RATE)
    n = pad_before + source.size + pad_after
    placed = np.zeros(n)
    placed[pad_before : pad_before + source.size] = source
    src_db = _power_db(_highpass(placed))
    region = np.zeros(src_db.size, dtype=bool)
    region[pad_before // HOP : (pad_before + source.size) // HOP] = True
    active = prominent_steps(src_db, region)
    snr_db = float("inf")
    if rng.random() < 0.9 or task.kind == "background":
        background = background_segment(rng, backgrounds, n)
        snr_db = float(rng.uniform(*SNR_RANGE_DB))
        if task.kind == "background":
            mix = background
        else:
            source_power = np.mean(10 ** (src_db[active] / 10)) if active.any() else 0.0
            bg_power = np.mean(background**2) + 1e-20
            gain = math.sqrt(bg_power * 10 ** (snr_db / 10) / max(source_power, 1e-20))
            placed *= gain
            mix = placed + background
        bg_db = _power_db(_highpass(background))
    else:
        mix = placed + rng.standard_normal(n) * 1e-5  # a quiet microphone floor
        bg_db = np.full(src_db.size, -100.0)
    src_db = _power_db(_highpass(placed))
    mix = scaled_to_dbfs(mix, rng.uniform(*LEVEL_RANGE_DBFS))
    mel = mel_of_audio(mix)
    labels = np.zeros(mel.shape[0], dtype=np.int8)
    if is_dog:
        # Dog where the source clearly stands out; the rest of a dog clip (its own noise, quiet
        # tails) is unknown, not "not dog"; background before and after it is not dog.
        m = min(labels.size, active.size)
        audible = src_db[:m] >= bg_db[:m] - MASKED_BELOW_BACKGROUND_DB
        labels[:m] = np.where(region[:m], -1, 0)
        labels[:m][active[:m] & audible] = 1
        edges = np.flatnonzero(np.diff(labels[:m].astype(int)) != 0)
        for e in edges:  # onset/offset jitter of +-2 steps is not an error
            labels[max(0, e - 1) : e + 3] = np.where(labels[max(0, e - 1) : e + 3] == 1, 1, -1)
    meta = {"clip_id": clip_id, "group": group, "label": label, "is_dog": is_dog,
            "snr_db": snr_db, "split": task.split, "kind": task.kind}  # fmt: skip
    return mel, labels, meta


def plan_tasks(
    clips: list[Clip], seed: int, fraction: float, dog_copies: int, other_copies: int,
    extra_negatives: int, val_copies: int, rare_copy_factor: int = RARE_COPY_FACTOR,
    no_lead_in_fraction: float = NO_LEAD_IN_FRACTION, extra_copies: int | None = None,
    tonal_negatives: int = 0,
) -> list[Task]:  # fmt: skip
    rng = np.random.default_rng(seed)
    per_label = collections.Counter(clip.label for clip in clips)
    tasks = []
    for i, clip in enumerate(clips):
        split = "val" if is_validation_group(clip.group, seed, fraction) else "train"
        base = dog_copies if clip.is_dog else other_copies
        if clip.extra and extra_copies is not None:
            base = extra_copies
        copies = val_copies if split == "val" else int(np.clip(
            round(base * REFERENCE_CLIPS[clip.is_dog] / per_label[clip.label]), base,
            rare_copy_factor * base))  # fmt: skip
        tasks += [Task(int(rng.integers(2**31)), "clip", i, split, no_lead_in_fraction)
                  for _ in range(copies)]  # fmt: skip
    for split, count in (("train", extra_negatives), ("val", extra_negatives // 4)):
        for k in range(count):
            kind = "synthetic" if k % 2 else "background"
            tasks.append(Task(int(rng.integers(2**31)), kind, -1, split))
    # Last, so that a set with them holds every stream of the set without them, bit for bit.
    tasks += [Task(int(rng.integers(2**31)), "tonal", -1, "train") for _ in range(tonal_negatives)]
    return tasks


def build(
    corpus: Path, out: Path, seed: int = 1, jobs: int = 2, val_fraction: float = 0.2,
    dog_copies: int = 8, other_copies: int = 5, extra_negatives: int = 1000, val_copies: int = 2,
    rare_copy_factor: int = RARE_COPY_FACTOR, no_lead_in_fraction: float = NO_LEAD_IN_FRACTION,
    extra_corpora: list[Path] | tuple[Path, ...] = (), extra_copies: int | None = None,
    tonal_negatives: int = 0, progress: Callable[[float, float], None] | None = None,
    left_out: frozenset[str] = frozenset(), left_out_note: str = "",
) -> None:  # fmt: skip
    """Write the training set for ``corpus`` (and ``extra_corpora``) to ``out``; ``progress``
    is told (streams made, streams) as each stream is made. The clips whose ids are in
    ``left_out`` are left out before anything is drawn (``left_out_note`` says why, in the
    set's configuration)."""
    clips = [c for c in read_manifests(corpus, extra_corpora) if c.clip_id not in left_out]
    pools = _pools(clips, seed, val_fraction)
    tasks = plan_tasks(clips, seed, val_fraction, dog_copies, other_copies, extra_negatives,
                       val_copies, rare_copy_factor, no_lead_in_fraction, extra_copies,
                       tonal_negatives)  # fmt: skip
    log.info("%d clips, %d streams to make with %d jobs", len(clips), len(tasks), jobs)
    started = time.monotonic()
    results = []
    with multiprocessing.Pool(jobs, _init_worker, (clips, pools)) as pool:
        for result in pool.imap(make_stream, tasks, chunksize=8):
            results.append(result)
            if progress is not None:
                progress(len(results), len(tasks))
            if len(results) % 500 == 0 or len(results) == len(tasks):
                elapsed = time.monotonic() - started
                log.info("%d/%d streams, %.0f s, about %.0f s to go", len(results), len(tasks),
                         elapsed, elapsed * (len(tasks) - len(results)) / len(results))
    mels = [r[0] for r in results]
    offsets = np.cumsum([0] + [m.shape[0] for m in mels])
    np.savez_compressed(
        out,
        mel=np.concatenate(mels),
        labels=np.concatenate([r[1] for r in results]),
        offsets=offsets,
        meta_json=np.array(json.dumps([r[2] for r in results])),
        config_json=np.array(json.dumps({
            "seed": seed, "val_fraction": val_fraction, "dog_copies": dog_copies,
            "other_copies": other_copies, "extra_negatives": extra_negatives,
            "val_copies": val_copies, "full_scale_db": FULL_SCALE_DB, "corpus": str(corpus),
            "reference_clips": {"dog": REFERENCE_CLIPS[True], "other": REFERENCE_CLIPS[False]},
            "rare_copy_factor": rare_copy_factor, "no_lead_in_fraction": no_lead_in_fraction,
            **({"extra_corpora": [str(f) for f in extra_corpora], "extra_copies": extra_copies}
               if extra_corpora else {}),
            **({"tonal_negatives": tonal_negatives} if tonal_negatives else {}),
            **({"left_out_clips": len(left_out), "left_out": left_out_note} if left_out else {}),
        })),
    )  # fmt: skip
    hours = offsets[-1] * HOP / RATE / 3600
    log.info("wrote %s: %d streams, %.1f h of audio, in %.0f s", out, len(mels), hours,
             time.monotonic() - started)  # fmt: skip


def load_trainset(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]],
                                       dict[str, Any]]:  # fmt: skip
    """The arrays and metadata :func:`build` wrote: mel rows, labels, stream offsets, per-stream
    metadata and the set's configuration."""
    with np.load(path, allow_pickle=False) as data:
        return (data["mel"], data["labels"], data["offsets"], json.loads(str(data["meta_json"])),
                json.loads(str(data["config_json"])))  # fmt: skip
