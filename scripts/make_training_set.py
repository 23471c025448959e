"""Turn a folder of audio plus a manifest into classifier training examples.

    python scripts/make_training_set.py CORPUS_DIR OUT.npz [--seed 1] [--jobs 2]
        [--extra-corpus DIR --extra-copies N]

CORPUS_DIR holds ``manifest.csv`` (columns ``clip_id``, ``binary`` = dog / not_dog, ``group``
= the original recording, ``file`` relative to the folder; ``label``, ``original_class`` and
``duration_s`` are used where present) and the audio files (any rate; mono or mixed down).
A city can run it on its own recordings.

Every example is a *stream*: one source clip, augmented toward deployment conditions (small
pitch/time change by resampling, distance low-pass for air absorption, synthetic
reverberation, a random spectral tilt and resonance), placed into a real background
recording (the manifest's ambience clips) at an SNR of -5..+20 dB with background before and
after it, scaled to a random level over +-20 dB around -30 dBFS, and then measured by the
sensor's own code (``sensor.frames.frames_from_samples`` at a nominal full scale of 100 dB
SPL, through the wire format and back: float16 mel levels). Options: a fraction of the clip
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

import argparse
import collections
import csv
import hashlib
import json
import logging
import math
import multiprocessing
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
import soxr
from scipy import signal

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sensor.frames import frames_from_samples  # noqa: E402
from sensor.wire import decode_frame, encode_frame  # noqa: E402

log = logging.getLogger("make_training_set")

RATE = 16000
HOP = 320  # 20 ms at 16 kHz: the sensor's mel hop
FULL_SCALE_DB = 100.0  # nominal calibration of the uncalibrated corpus
MAX_SOURCE_S = 10.0
SNR_RANGE_DB = (-5.0, 20.0)
LEVEL_RANGE_DBFS = (-50.0, -10.0)  # mixture RMS: about -30 dBFS +- 20 dB
ACTIVE_BELOW_PEAK_DB = 30.0
PROMINENT_DB = 8.0  # a bark stands this far above its clip's own floor
MASKED_BELOW_BACKGROUND_DB = 6.0
# Options (off by default: the bundled model was trained without them; MODEL_CARD.md has the
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
    audio, rate = soundfile.read(path, dtype="float64", always_2d=True)
    mono = audio.mean(axis=1)
    if rate != RATE:
        mono = soxr.resample(mono, rate, RATE)
    return np.asarray(mono, dtype=np.float64)


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


def _reverb(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    rt60 = rng.uniform(0.2, 1.2)
    n = int(rt60 * RATE)
    t = np.arange(n) / RATE
    tail = rng.standard_normal(n) * np.exp(-6.9 * t / rt60)
    tail[: int(0.002 * RATE)] = 0.0
    drr_db = rng.uniform(-3.0, 10.0)  # direct-to-reverberant ratio
    tail *= 10 ** (-drr_db / 20) / math.sqrt(np.sum(tail**2) + 1e-12)
    ir = np.concatenate([[1.0], tail[1:]])
    return np.asarray(signal.fftconvolve(x, ir)[: x.size + n // 2])


def augment_source(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """Pitch/time (resampling by up to +-6 %), distance low-pass, reverberation."""
    if x.size > MAX_SOURCE_S * RATE:
        start = rng.integers(0, x.size - int(MAX_SOURCE_S * RATE))
        x = x[start : start + int(MAX_SOURCE_S * RATE)]
    if rng.random() < 0.6:
        x = np.asarray(soxr.resample(x, RATE, RATE * rng.uniform(0.94, 1.06)))
    if rng.random() < 0.5:
        # Air absorption over tens of metres takes the top octaves first (ISO 9613-1).
        sos = signal.butter(2, rng.uniform(2000.0, 7000.0), fs=RATE, output="sos")
        x = np.asarray(signal.sosfilt(sos, x))
    if rng.random() < 0.4:
        x = _reverb(rng, x)
    if rng.random() < 0.6:
        x = random_colouring(rng, x)
    return x


def random_colouring(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """A microphone's or a wall's colouring: a spectral tilt and one resonance or dip, +-6 dB."""
    tilt = rng.uniform(-0.6, 0.6)  # first-order tilt: +-6 dB or so between 300 Hz and 5 kHz
    y = signal.lfilter([1.0, -tilt], [1.0], x) / (1.0 + abs(tilt))
    b, a = signal.iirpeak(rng.uniform(300.0, 5000.0), rng.uniform(1.0, 4.0), fs=RATE)
    y = y + rng.uniform(-0.5, 1.0) * signal.lfilter(b, a, y)
    return np.asarray(y)


def background_segment(rng: np.random.Generator, pool: list[np.ndarray], n: int) -> np.ndarray:
    """``n`` samples of one or two real background recordings, looped if short."""
    out = np.zeros(n)
    for k in range(1 if rng.random() < 0.7 else 2):
        bg = pool[rng.integers(len(pool))]
        start = rng.integers(0, max(1, bg.size - n))
        piece = np.resize(np.roll(bg, -start), n)
        out += piece * (1.0 if k == 0 else 10 ** (rng.uniform(-15.0, 0.0) / 20))
    return out


def _synthetic_tone(rng: np.random.Generator, kind: int, t: np.ndarray) -> np.ndarray:
    """A steady tone (kind 0), beeps (1) or a siren-like sweep (2) at the sample times ``t``."""
    if kind == 0:
        return np.sin(2 * np.pi * rng.uniform(150.0, 5000.0) * t)
    if kind == 1:
        x = np.sin(2 * np.pi * rng.uniform(400.0, 4000.0) * t)
        period, on = rng.uniform(0.15, 1.0), rng.uniform(0.2, 0.7)
        return x * ((t % period) < on * period).astype(float)
    f0, depth, rate = rng.uniform(500, 1500), rng.uniform(200, 800), rng.uniform(0.2, 4.0)
    return np.sin(2 * np.pi * np.cumsum(f0 + depth * np.sin(2 * np.pi * rate * t)) / RATE)


def synthetic_negative(rng: np.random.Generator) -> np.ndarray:
    """A tone, beeps, a siren-like sweep, a noise burst or (near) silence: not a dog."""
    n = int(rng.uniform(1.0, 6.0) * RATE)
    t = np.arange(n) / RATE
    kind = rng.integers(5)
    if kind <= 2:
        x = _synthetic_tone(rng, int(kind), t)
    elif kind == 3:
        x = rng.standard_normal(n)
        if rng.random() < 0.5:
            sos = signal.butter(2, rng.uniform(300, 3000), fs=RATE, output="sos")
            x = signal.sosfilt(sos, x)
        x *= (rng.random(n // 1600 + 1) < 0.5).repeat(1600)[:n]
    else:
        x = rng.standard_normal(n) * 1e-3
    return np.asarray(x, dtype=np.float64)


def chirp_train(rng: np.random.Generator, n: int) -> np.ndarray:
    """Bird-like song: short fast sweeps of 1.5-7.5 kHz, some trilled, some with a harmonic."""
    x = np.zeros(n)
    start = int(rng.uniform(0.0, 0.3) * RATE)
    while start < n:
        m = int(rng.uniform(0.02, 0.25) * RATE)
        t = np.arange(m) / RATE
        f_start = rng.uniform(1500.0, 7500.0)
        f_end = np.clip(f_start * 2 ** rng.uniform(-1.5, 1.5), 1500.0, 7500.0)
        freq = f_start + (f_end - f_start) * t / t[-1]
        if rng.random() < 0.4:  # a trill
            freq *= 1 + rng.uniform(0.03, 0.15) * np.sin(2 * np.pi * rng.uniform(20, 60) * t)
        phase = 2 * np.pi * np.cumsum(freq) / RATE
        chirp = np.sin(phase)
        if rng.random() < 0.5 and freq.max() < 3900.0:
            chirp += rng.uniform(0.1, 0.5) * np.sin(2 * phase)
        chirp *= np.hanning(m) * rng.uniform(0.3, 1.0)
        end = min(n, start + m)
        x[start:end] += chirp[: end - start]
        start = end + int(rng.exponential(rng.uniform(0.03, 0.4)) * RATE)
    return x


def harmonic_beeps(rng: np.random.Generator, t: np.ndarray) -> np.ndarray:
    """An alarm or a reversing beeper: a 1-3 kHz square-ish tone, one or two pitches, pulsed."""
    base, swap = rng.uniform(1000.0, 3000.0), rng.uniform(0.2, 1.5)  # two pitches: swap period
    low = rng.uniform(0.7, 0.9) if rng.random() < 0.5 else 1.0
    f0 = base * np.where(t % swap < swap / 2, 1.0, low)
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    x = np.zeros(t.size)
    for k in (1, 3, 5, 7):  # odd harmonics under the 8 kHz Nyquist frequency
        x += np.sin(k * phase) / k * (k * f0 < 7800.0)
    if rng.random() < 0.7:
        period, on = rng.uniform(0.15, 1.5), rng.uniform(0.2, 0.8)
        x *= (t % period) < on * period
    return x


def tonal_negative(rng: np.random.Generator) -> np.ndarray:
    """A narrow-band sound that is not a dog: bird-like chirps, alarm beeps, a whistle's glide,
    or one of the synthetic negatives' tones, beeps or sweeps (``--tonal-negatives``)."""
    n = int(rng.uniform(1.0, 6.0) * RATE)
    t = np.arange(n) / RATE
    kind = rng.integers(4)
    if kind == 0:
        x = chirp_train(rng, n)
    elif kind == 1:
        x = harmonic_beeps(rng, t)
    elif kind == 2:  # whistling: a pure tone gliding slowly between 1.5 and 4 kHz
        contour = np.cumsum(rng.standard_normal(n // 1600 + 2)) * rng.uniform(50.0, 300.0)
        freq = np.clip(rng.uniform(1500.0, 4000.0) + np.interp(
            np.arange(n), np.arange(contour.size) * 1600, contour), 1500.0, 4000.0)  # fmt: skip
        x = np.sin(2 * np.pi * np.cumsum(freq) / RATE)
    else:
        x = _synthetic_tone(rng, int(rng.integers(3)), t)
    return np.asarray(x, dtype=np.float64)


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
    """The sensor's mel rows of a signal, exactly as the analyzer receives them (float16)."""
    rows = [
        decode_frame(encode_frame(frame)).mel_db
        for frame in frames_from_samples(audio, RATE, full_scale_db)
    ]
    return np.concatenate(rows).astype(np.float16)


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
    tonal_negatives: int = 0,
) -> None:  # fmt: skip
    """Write the training set for ``corpus`` (and ``extra_corpora``) to ``out``."""
    clips = read_manifests(corpus, extra_corpora)
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
        })),
    )  # fmt: skip
    hours = offsets[-1] * HOP / RATE / 3600
    log.info("wrote %s: %d streams, %.1f h of audio, in %.0f s", out, len(mels), hours,
             time.monotonic() - started)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="folder with manifest.csv and the audio")
    parser.add_argument("out", type=Path, help="output .npz")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--val-fraction", type=float, default=0.2)
    parser.add_argument("--dog-copies", type=int, default=8, help="augmented copies per dog clip")
    parser.add_argument("--other-copies", type=int, default=5, help="copies per other clip")
    parser.add_argument("--rare-copy-factor", type=int, default=RARE_COPY_FACTOR,
                        help="rare labels get up to this many times the copies (1: off)")
    parser.add_argument("--no-lead-in-fraction", type=float, default=NO_LEAD_IN_FRACTION,
                        help="fraction of clip streams that start with the clip itself")
    parser.add_argument("--extra-negatives", type=int, default=1000,
                        help="background-only and synthetic streams")  # fmt: skip
    parser.add_argument("--tonal-negatives", type=int, default=0, metavar="N",
                        help="N more training streams of narrow-band sounds: bird-like chirps, "
                        "alarm beeps, whistles, tones (validation keeps only real clips and the "
                        "synthetic negatives)")  # fmt: skip
    parser.add_argument("--extra-corpus", type=Path, action="append", default=[], metavar="DIR",
                        help="another folder with manifest.csv and audio (repeatable)")
    parser.add_argument("--extra-copies", type=int, metavar="N",
                        help="augmented copies per clip of the extra corpora (default: as the "
                        "main corpus's dog or other copies)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.tonal_negatives < 0:
        parser.error(f"--tonal-negatives must be 0 or more, not {args.tonal_negatives}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("sensor.frames").setLevel(logging.ERROR)  # 16 kHz corpus: known
    for folder in (args.corpus, *args.extra_corpus):
        if not (folder / "manifest.csv").is_file():
            parser.error(f"{folder}/manifest.csv not found")
    build(args.corpus, args.out, seed=args.seed, jobs=args.jobs, val_fraction=args.val_fraction,
          dog_copies=args.dog_copies, other_copies=args.other_copies,
          extra_negatives=args.extra_negatives, rare_copy_factor=args.rare_copy_factor,
          no_lead_in_fraction=args.no_lead_in_fraction, extra_corpora=args.extra_corpus,
          extra_copies=args.extra_copies, tonal_negatives=args.tonal_negatives)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
