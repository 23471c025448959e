"""What the dog head learns from and is judged on: mixed streams, clean clips and soundscapes,
each with YAMNet's outputs per patch and the bundled CNN's score per 20-ms step.

Every stream is scored by the two networks exactly as the sensor will (issue 24, wire v2):
YAMNet (``analyzer.detect.YamnetNetwork``) on ``sensor.yamnet_features.clip_patches`` of the
16 kHz samples (patch ``p`` starts at ``p`` x 0.48 s), and the bundled CNN on the sensor's own
mel rows through the wire (``training.trainset.mel_of_audio``, nominal 100 dB SPL full scale),
by the streaming scorer (``training.validate.stream_scores``). Nothing else of a stream is kept.

- **Mixed streams** (training): a clip augmented as the CNN's training set augments it
  (``training.augment.augment_source``: pitch/time, distance low-pass, reverberation,
  colouring) placed into one or two real background recordings at -5..+20 dB SNR, with
  background before and after (``training.trainset.make_stream``'s recipe, kept here with the
  audio rather than the mel rows), except that a background's source is drawn first (all
  sources alike), then one of its recordings. Step labels as there: 1 where a dog clip stands
  out of its floor and is not masked, -1 in the rest of a dog clip, 0 elsewhere. Each stream
  records the sources of its clip and of its backgrounds, so that a left-out source's audio
  never reaches the head trained without it.
- **Clean clips** (leave-one-source-out clip figures): each clip as recorded.
- **Soundscapes** (event F1, false alarms per hour): per source, its dog clips as recorded
  (at most 80, drawn), placed 3-8 s apart into a bed of *held-out* background recordings
  (never used in any training stream) at a fixed SNR per band (-5, 0, +5, +10 dB); and its
  non-dog clips (at most 60), 1-4 s apart, at 0..+20 dB SNR into the same kind of bed.
  Reference events: runs of a dog clip's labelled steps, merged across gaps under the event
  tracker's merge gap.

Results are cached as ``.npz`` under ``~/.cache/barkwatch/head/`` (no pickled objects), named by
a digest of the recipe and the corpus manifests: computing them takes tens of minutes on one core.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.config import DetectorSettings
from analyzer.detect import DEFAULT_MODEL_PATH, YamnetNetwork, load_model
from analyzer.detect.classifier import DogModel
from sensor.yamnet_features import PATCH_HOP_S, PATCH_S, clip_patches
from training.augment import augment_source
from training.corpus import RATE, Clip, load_audio, read_manifest, unit_hash
from training.trainset import (
    BACKGROUND_LABELS,
    HOP,
    LEVEL_RANGE_DBFS,
    MASKED_BELOW_BACKGROUND_DB,
    SNR_RANGE_DB,
    _highpass,
    _power_db,
    mel_of_audio,
    prominent_steps,
    scaled_to_dbfs,
)
from training.validate import runs, stream_scores

log = logging.getLogger(__name__)

CACHE_DIR = Path.home() / ".cache" / "barkwatch" / "head"
RECIPE_VERSION = 1  # bump when a stream's recipe changes: the cache name changes with it
STEP_S = HOP / RATE  # 0.02 s
STEPS_PER_PATCH_HOP = round(PATCH_HOP_S / STEP_S)  # 24
STEPS_PER_PATCH = round(PATCH_S / STEP_S)  # 48
PATCH_DOG_STEPS = 5  # a patch is dog when >= 0.1 s of its steps are labelled dog
HELD_OUT_BACKGROUND_FRACTION = 0.3  # of background recordings, kept for soundscapes only
SOUNDSCAPE_SNRS_DB = (-5.0, 0.0, 5.0, 10.0)
# per source, so that the biggest (UrbanSound8K) does not drown the others and a loaded
# 2-core machine makes them in minutes
SOUNDSCAPE_DOG_CLIPS = 80
SOUNDSCAPE_OTHER_CLIPS = 60
BED_LEVEL_DBFS = -35.0  # a soundscape's background bed, RMS
YAMNET_BATCH = 256  # patches per network call (bounded memory on hour-long soundscapes)


@dataclass(frozen=True)
class CorpusClip:
    """A clip of a corpus with the source it came from (``source``, else ``repo``)."""

    clip: Clip
    corpus: str
    source: str

    @property
    def source_key(self) -> str:
        """Source name unique over corpora: ``corpus/source``."""
        return f"{self.corpus}/{self.source}"


def read_corpora(corpora: list[Path]) -> list[CorpusClip]:
    """Every clip of the corpora (dog snoring left out, as in training), with its source."""
    out = []
    for corpus in corpora:
        with (corpus / "manifest.csv").open(newline="") as file:
            sources = {
                row["clip_id"]: row.get("source") or row.get("repo") or row["group"]
                for row in csv.DictReader(file)
            }
        out += [CorpusClip(c, corpus.name, sources[c.clip_id]) for c in read_manifest(corpus)]
    return out


def is_background(item: CorpusClip) -> bool:
    """A steady non-dog recording worth mixing under other sounds (the CNN's pool)."""
    clip = item.clip
    return not clip.is_dog and clip.label in BACKGROUND_LABELS and clip.duration_s >= 4.0


def is_held_out_background(item: CorpusClip) -> bool:
    """A background kept for soundscapes: in no training stream, as clip or as background."""
    return is_background(item) and unit_hash(f"soundscape-bed:{item.clip.group}") < (
        HELD_OUT_BACKGROUND_FRACTION
    )


def held_out_sources(report: Path) -> frozenset[str]:
    """The sources a fine-tuning report (``barkwatch-train finetune --export``'s JSON) kept out
    of training; ValueError naming the file when it cannot be read or holds none."""
    try:
        return frozenset(json.loads(report.read_text())["held_out_sources"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{report}: no held_out_sources ({error})") from error


def corpus_digest(corpora: list[Path]) -> str:
    """Digest of the manifests and the recipe version: names the caches."""
    digest = hashlib.sha256(str(RECIPE_VERSION).encode())
    for corpus in corpora:
        digest.update((corpus / "manifest.csv").read_bytes())
    return digest.hexdigest()[:12]


class Scorers:
    """YAMNet and the bundled CNN, run on 16 kHz samples as the sensor runs them."""

    def __init__(self, cnn: DogModel | None = None) -> None:
        self.yamnet = YamnetNetwork()
        self.cnn = cnn if cnn is not None else load_model(DEFAULT_MODEL_PATH)
        self.settings = DetectorSettings()

    def run(self, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Embeddings (k x 1024), class scores (k x 521) and CNN step scores (n,)."""
        patches = clip_patches(audio.astype(np.float32))
        emb, ys = [], []
        for i in range(0, len(patches), YAMNET_BATCH):
            out = self.yamnet.run(patches[i : i + YAMNET_BATCH])
            emb.append(out.embeddings)
            ys.append(out.scores)
        cnn = stream_scores(self.cnn, mel_of_audio(audio), self.settings)
        n = audio.size // HOP
        return (np.concatenate(emb).astype(np.float32), np.concatenate(ys).astype(np.float32),
                np.asarray(cnn[:n], np.float32))  # fmt: skip


def patch_labels(step_labels: np.ndarray, n_patches: int) -> np.ndarray:
    """Per patch: 1 when >= PATCH_DOG_STEPS of its steps are dog, 0 when none is dog or
    uncertain (-1), else -1 (ignored in training)."""
    out = np.zeros(n_patches, np.int8)
    for p in range(n_patches):
        window = step_labels[p * STEPS_PER_PATCH_HOP : p * STEPS_PER_PATCH_HOP + STEPS_PER_PATCH]
        dog = int(np.sum(window == 1))
        out[p] = 1 if dog >= PATCH_DOG_STEPS else (0 if dog == 0 and not np.any(window < 0) else -1)
    return out


def step_powers_db(placed: np.ndarray, background: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per 20-ms step, the power (dB) of the placed sound and of the background under it, both
    high-passed as the labels are."""
    return _power_db(_highpass(placed)), _power_db(_highpass(background))


def dog_step_labels(placed: np.ndarray, background: np.ndarray, region: np.ndarray) -> np.ndarray:
    """The CNN training set's step labels (``training.trainset.make_stream``): 1 where the placed
    dog sound stands out of its own floor and is not masked by the background, -1 in the rest
    of its region, 0 elsewhere."""
    return labels_of_powers(*step_powers_db(placed, background), region)


def labels_of_powers(src_db: np.ndarray, bg_db: np.ndarray, region: np.ndarray) -> np.ndarray:
    """:func:`dog_step_labels` from the steps' powers (:func:`step_powers_db`)."""
    active = prominent_steps(src_db, region[: src_db.size])
    audible = src_db >= bg_db - MASKED_BELOW_BACKGROUND_DB
    labels = np.where(region[: src_db.size], -1, 0).astype(np.int8)
    labels[active & audible] = 1
    return labels


def gain_for_snr(placed: np.ndarray, background: np.ndarray, region: np.ndarray,
                 snr_db: float) -> float:  # fmt: skip
    """Gain on ``placed`` that puts its prominent steps ``snr_db`` over the background."""
    src_db = _power_db(_highpass(placed))
    active = prominent_steps(src_db, region[: src_db.size])
    source_power = float(np.mean(10 ** (src_db[active] / 10))) if active.any() else 0.0
    bg_power = float(np.mean(background**2)) + 1e-20
    return math.sqrt(bg_power * 10 ** (snr_db / 10) / max(source_power, 1e-20))


def _region(n: int, start: int, length: int) -> np.ndarray:
    region = np.zeros(n // HOP, dtype=bool)
    region[start // HOP : (start + length) // HOP] = True
    return region


def mixed_stream(
    rng: np.random.Generator, source: np.ndarray, is_dog: bool,
    backgrounds: list[tuple[np.ndarray, str]],
) -> tuple[np.ndarray, np.ndarray, float, list[str]]:  # fmt: skip
    """One training stream: the augmented clip in background; samples, step labels, the SNR
    and the sources of the backgrounds used."""
    source = augment_source(rng, source)
    pad_before = int(rng.uniform(0.3, 2.5) * RATE)
    pad_after = int(rng.uniform(0.3, 2.0) * RATE)
    n = pad_before + source.size + pad_after
    placed = np.zeros(n)
    placed[pad_before : pad_before + source.size] = source
    region = _region(n, pad_before, source.size)
    used: list[str] = []
    background = rng.standard_normal(n) * 1e-5  # a quiet microphone floor
    snr_db = float("inf")
    if rng.random() < 0.9:
        background = np.zeros(n)
        for k in range(1 if rng.random() < 0.7 else 2):
            # a source first, then one of its recordings: every source's backgrounds weigh
            # alike, so leaving one source out (and its backgrounds) keeps most streams
            bg_sources = sorted({b[1] for b in backgrounds})
            chosen = bg_sources[int(rng.integers(len(bg_sources)))]
            pool = [b for b in backgrounds if b[1] == chosen]
            bg, bg_source = pool[int(rng.integers(len(pool)))]
            start = int(rng.integers(0, max(1, bg.size - n)))
            piece = np.resize(np.roll(bg, -start), n)
            background += piece * (1.0 if k == 0 else 10 ** (rng.uniform(-15.0, 0.0) / 20))
            used.append(bg_source)
        snr_db = float(rng.uniform(*SNR_RANGE_DB))
        placed *= gain_for_snr(placed, background, region, snr_db)
    labels = dog_step_labels(placed, background, region) if is_dog else np.zeros(n // HOP, np.int8)
    level = rng.uniform(*LEVEL_RANGE_DBFS)
    return scaled_to_dbfs(placed + background, level), labels, snr_db, used


class _Collector:
    """Streams' network outputs, concatenated, with offsets and per-stream metadata."""

    def __init__(self) -> None:
        self.emb: list[np.ndarray] = []
        self.ys: list[np.ndarray] = []
        self.cnn: list[np.ndarray] = []
        self.steps: list[np.ndarray] = []
        self.patches: list[np.ndarray] = []
        self.meta: list[dict[str, Any]] = []

    def add(self, scorers: Scorers, audio: np.ndarray, step_labels: np.ndarray,
            meta: dict[str, Any]) -> None:  # fmt: skip
        emb, ys, cnn = scorers.run(audio)
        labels = np.zeros(cnn.size, np.int8)
        m = min(cnn.size, step_labels.size)
        labels[:m] = step_labels[:m]
        self.emb.append(emb.astype(np.float16))
        self.ys.append(ys)
        self.cnn.append(cnn)
        self.steps.append(labels)
        self.patches.append(patch_labels(labels, len(emb)))
        self.meta.append(meta)

    def save(self, path: Path, config: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(
            tmp,
            emb=np.concatenate(self.emb),
            ys=np.concatenate(self.ys),
            cnn=np.concatenate(self.cnn),
            step_labels=np.concatenate(self.steps),
            patch_labels=np.concatenate(self.patches),
            patch_offsets=np.cumsum([0] + [len(e) for e in self.emb]),
            step_offsets=np.cumsum([0] + [len(c) for c in self.cnn]),
            meta_json=np.array(json.dumps(self.meta)),
            config_json=np.array(json.dumps(config)),
        )
        tmp.replace(path)


@dataclass
class StreamSet:
    """Network outputs of many streams (a cache file's contents)."""

    emb: np.ndarray  # all patches x 1024, float16
    ys: np.ndarray  # all patches x 521
    cnn: np.ndarray  # all steps
    step_labels: np.ndarray
    patch_labels: np.ndarray
    patch_offsets: np.ndarray
    step_offsets: np.ndarray
    meta: list[dict[str, Any]]

    @classmethod
    def load(cls, path: Path) -> StreamSet:
        with np.load(path, allow_pickle=False) as data:
            return cls(data["emb"], data["ys"], data["cnn"], data["step_labels"],
                       data["patch_labels"], data["patch_offsets"], data["step_offsets"],
                       json.loads(str(data["meta_json"])))  # fmt: skip

    def patch_stream_index(self) -> np.ndarray:
        """Per patch, the index of its stream."""
        return np.repeat(np.arange(len(self.meta)), np.diff(self.patch_offsets))

    def step_stream_index(self) -> np.ndarray:
        """Per step, the index of its stream."""
        return np.repeat(np.arange(len(self.meta)), np.diff(self.step_offsets))

    def streams(self) -> Iterator[tuple[int, slice, slice]]:
        """(stream, its patch slice, its step slice)."""
        for i in range(len(self.meta)):
            yield (i, slice(int(self.patch_offsets[i]), int(self.patch_offsets[i + 1])),
                   slice(int(self.step_offsets[i]), int(self.step_offsets[i + 1])))  # fmt: skip


def _progress(what: str, done: int, total: int, started: float) -> None:
    if done % 100 == 0 or done == total:
        elapsed = time.monotonic() - started
        log.info("%s: %d/%d, %.0f s, about %.0f s to go", what, done, total, elapsed,
                 elapsed * (total - done) / max(done, 1))  # fmt: skip


def build_training_streams(clips: list[CorpusClip], path: Path, seed: int, dog_copies: int,
                           other_copies: int, part: tuple[int, int] = (0, 1)) -> None:  # fmt: skip
    """Mixed streams of every clip except held-out backgrounds, into ``path``; ``part`` (k, n):
    only the streams whose index is k modulo n (one of n processes)."""
    scorers = Scorers()
    bed = [c for c in clips if is_background(c) and not is_held_out_background(c)]
    backgrounds = [(load_audio(c.clip.path), c.source_key) for c in bed]
    rng = np.random.default_rng(seed)
    tasks = [(c, int(rng.integers(2**31))) for c in clips if not is_held_out_background(c)
             for _ in range(dog_copies if c.clip.is_dog else other_copies)]  # fmt: skip
    tasks = tasks[part[0] :: part[1]]
    collector = _Collector()
    started = time.monotonic()
    for k, (item, stream_seed) in enumerate(tasks, 1):
        stream_rng = np.random.default_rng(stream_seed)
        audio, labels, snr_db, used = mixed_stream(
            stream_rng, load_audio(item.clip.path), item.clip.is_dog,
            [b for b in backgrounds if b[1] != item.source_key] or backgrounds)  # fmt: skip
        collector.add(scorers, audio, labels, {
            "clip_id": item.clip.clip_id, "source": item.source_key, "label": item.clip.label,
            "is_dog": item.clip.is_dog, "group": item.clip.group, "snr_db": snr_db,
            "background_sources": used})  # fmt: skip
        _progress("training streams", k, len(tasks), started)
    collector.save(path, {"seed": seed, "dog_copies": dog_copies, "other_copies": other_copies})


def build_clean_clips(clips: list[CorpusClip], path: Path, part: tuple[int, int] = (0, 1)
                      ) -> None:  # fmt: skip
    """Every clip as recorded (its digital level), into ``path``; ``part`` as for
    :func:`build_training_streams`."""
    scorers = Scorers()
    clips = clips[part[0] :: part[1]]
    collector = _Collector()
    started = time.monotonic()
    for k, item in enumerate(clips, 1):
        audio = load_audio(item.clip.path)
        labels = np.full(audio.size // HOP, -1 if item.clip.is_dog else 0, np.int8)
        collector.add(scorers, audio, labels, {
            "clip_id": item.clip.clip_id, "source": item.source_key, "label": item.clip.label,
            "is_dog": item.clip.is_dog, "group": item.clip.group,
            "held_out_background": is_held_out_background(item)})  # fmt: skip
        _progress("clean clips", k, len(clips), started)
    collector.save(path, {})


def _bed(rng: np.random.Generator, beds: list[np.ndarray], n: int) -> np.ndarray:
    """``n`` samples of held-out backgrounds end to end (random order, 50-ms fades), at
    BED_LEVEL_DBFS RMS."""
    out = np.zeros(n)
    fade = int(0.05 * RATE)
    ramp = np.linspace(0.0, 1.0, fade)
    at = 0
    while at < n:
        piece = beds[int(rng.integers(len(beds)))].copy()
        piece[:fade] *= ramp
        piece[-fade:] *= ramp[::-1]
        piece *= 10 ** (BED_LEVEL_DBFS / 20) / (math.sqrt(np.mean(piece**2)) + 1e-12)
        end = min(n, at + piece.size)
        out[at:end] += piece[: end - at]
        if end == n:
            break
        at = end - fade
    return out


def soundscape(rng: np.random.Generator, sounds: list[np.ndarray], beds: list[np.ndarray],
               gap_s: tuple[float, float], snr_db: tuple[float, float], is_dog: bool,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Sounds placed one after another into a held-out background bed; samples, step labels
    (dog clips: 1/-1/0 as in training; other sounds: 0) and each step's own SNR (dB of the
    placed dog sound over the bed under it, high-passed as the labels are; NaN where no dog
    sound is). A soundscape's band fixes the SNR of a clip's prominent steps on average; single
    barks stand above or below it, which the own SNR tells."""
    gaps = [int(rng.uniform(*gap_s) * RATE) for _ in sounds]
    n = sum(gaps) + sum(s.size for s in sounds) + int(gap_s[1] * RATE)
    bed = _bed(rng, beds, n)
    mix = bed.copy()
    labels = np.zeros(n // HOP, np.int8)
    own_snr = np.full(n // HOP, np.nan, np.float32)
    at = 0
    for sound, gap in zip(sounds, gaps, strict=True):
        at += gap
        at -= at % HOP  # sounds start on a step boundary: labels are exact
        span = slice(at, at + sound.size)
        placed = np.zeros(sound.size)
        placed[:] = sound
        region = np.ones(sound.size // HOP + 1, dtype=bool)
        gain = gain_for_snr(placed, bed[span], region, float(rng.uniform(*snr_db)))
        mix[span] += placed * gain
        if is_dog:
            src_db, bg_db = step_powers_db(placed * gain, bed[span])
            step_labels = labels_of_powers(src_db, bg_db, region)
            first = at // HOP
            seg = labels[first : first + step_labels.size]
            labels[first : first + step_labels.size] = np.where(step_labels != 0, step_labels, seg)
            snr = src_db - bg_db
            m = min(snr.size, own_snr.size - first)
            own_snr[first : first + m] = snr[:m]
        at += sound.size
    return mix, labels, own_snr


def reference_spans(step_labels: np.ndarray, merge_gap_s: float, min_duration_s: float
                    ) -> list[tuple[float, float]]:  # fmt: skip
    """Reference events of a soundscape: runs of dog steps merged across gaps under
    ``merge_gap_s`` (the event tracker's rule), shorter than ``min_duration_s`` dropped."""
    return [(a, b) for a, b in runs(step_labels == 1, merge_gap_s) if b - a >= min_duration_s]


def _at_most(rng: np.random.Generator, items: list[CorpusClip], n: int) -> list[CorpusClip]:
    """``n`` of the items drawn without replacement (all of them when there are no more)."""
    if len(items) <= n:
        return items
    return [items[i] for i in sorted(rng.choice(len(items), n, replace=False))]


def _soundscape_plan(clips: list[CorpusClip], seed: int
                     ) -> list[tuple[str, float | None, list[CorpusClip], list[int]]]:  # fmt: skip
    """Per source: (source, SNR band or None for its confusers, clips, the stream's seed)."""
    plan: list[tuple[str, float | None, list[CorpusClip], list[int]]] = []
    for k, source in enumerate(sorted({c.source_key for c in clips})):
        rng = np.random.default_rng([seed, k])
        mine = [c for c in clips if c.source_key == source and not is_held_out_background(c)]
        dogs = _at_most(rng, [c for c in mine if c.clip.is_dog], SOUNDSCAPE_DOG_CLIPS)
        others = _at_most(rng, [c for c in mine if not c.clip.is_dog], SOUNDSCAPE_OTHER_CLIPS)
        plan += [(source, snr, dogs, [seed, k, i]) for i, snr in enumerate(SOUNDSCAPE_SNRS_DB)
                 if dogs]  # fmt: skip
        plan += [(source, None, others, [seed, k, 99])] if others else []
    return plan


def _planned_soundscape(
    beds: list[np.ndarray], items: list[CorpusClip], snr: float | None, stream_seed: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One soundscape of :func:`_soundscape_plan`: samples, step labels, steps' own SNR."""
    rng = np.random.default_rng(stream_seed)
    sounds = [load_audio(c.clip.path) for c in items]
    is_dog = snr is not None
    level = (snr, snr) if snr is not None else (0.0, 20.0)
    gaps = (3.0, 8.0) if is_dog else (1.0, 4.0)
    return soundscape(rng, sounds, beds, gaps, level, is_dog)


def build_soundscapes(clips: list[CorpusClip], path: Path, seed: int,
                      part: tuple[int, int] = (0, 1)) -> None:  # fmt: skip
    """Per source: a dog soundscape per SNR band (of at most SOUNDSCAPE_DOG_CLIPS of its dog
    clips) and a confuser soundscape (at most SOUNDSCAPE_OTHER_CLIPS of its other clips), into
    ``path``; ``part`` (k, n): only the soundscapes whose index is k modulo n."""
    scorers = Scorers()
    beds = [load_audio(c.clip.path) for c in clips if is_held_out_background(c)]
    plan = _soundscape_plan(clips, seed)[part[0] :: part[1]]
    collector = _Collector()
    started = time.monotonic()
    for k, (source, snr, items, stream_seed) in enumerate(plan, 1):
        audio, labels, _ = _planned_soundscape(beds, items, snr, stream_seed)
        collector.add(scorers, audio, labels, {
            "source": source, "kind": "dog" if snr is not None else "confusers", "snr_db": snr,
            "clips": len(items), "duration_s": audio.size / RATE})  # fmt: skip
        log.info("soundscape %d/%d (%s, %s dB, %.0f s) done, %.0f s", k, len(plan), source, snr,
                 audio.size / RATE, time.monotonic() - started)  # fmt: skip
    collector.save(path, {"seed": seed, "snrs_db": SOUNDSCAPE_SNRS_DB})


def build_own_snrs(clips: list[CorpusClip], path: Path, seed: int) -> None:
    """The dog soundscapes of :func:`build_soundscapes` made again, without the networks (a
    minute, not an hour): each step's own SNR and its label, to check they are the same
    soundscapes. Kept as ``own_snr_db`` and ``step_labels`` with ``keys`` (source, band)."""
    beds = [load_audio(c.clip.path) for c in clips if is_held_out_background(c)]
    keys, snrs, labels = [], [], []
    for source, snr, items, stream_seed in _soundscape_plan(clips, seed):
        if snr is None:
            continue
        _, step_labels, own = _planned_soundscape(beds, items, snr, stream_seed)
        keys.append(f"{source}@{snr:+.0f}")
        snrs.append(own)
        labels.append(step_labels)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, keys=np.array(keys), own_snr_db=np.concatenate(snrs),
             step_labels=np.concatenate(labels),
             step_offsets=np.cumsum([0] + [a.size for a in snrs]))  # fmt: skip


def own_snrs(path: Path, scapes: StreamSet) -> dict[int, np.ndarray]:
    """Per dog soundscape of ``scapes`` (by index), its steps' own SNR from ``path``
    (:func:`build_own_snrs`); raises ValueError when the labels differ (not the same
    soundscapes: the corpus or the recipe changed)."""
    with np.load(path, allow_pickle=False) as data:
        keys = [str(k) for k in data["keys"]]
        offsets, snr, labels = data["step_offsets"], data["own_snr_db"], data["step_labels"]
    out = {}
    for i, meta in enumerate(scapes.meta):
        if meta["kind"] != "dog":
            continue
        k = keys.index(f"{meta['source']}@{meta['snr_db']:+.0f}")
        s0, s1 = int(scapes.step_offsets[i]), int(scapes.step_offsets[i + 1])
        own, own_labels = snr[offsets[k] : offsets[k + 1]], labels[offsets[k] : offsets[k + 1]]
        n = min(s1 - s0, own.size)
        if not np.array_equal(own_labels[:n], scapes.step_labels[s0 : s0 + n]):
            raise ValueError(f"{path}: soundscape {keys[k]} has other labels than the cache's")
        out[i] = np.r_[own[:n], np.full(s1 - s0 - n, np.nan, np.float32)]
    return out


def merge(parts: list[StreamSet], path: Path) -> None:
    """One cache file of several parts' streams (in the parts' order)."""
    collector = _Collector()
    for data in parts:
        for i, patches, steps in data.streams():
            collector.emb.append(data.emb[patches])
            collector.ys.append(data.ys[patches])
            collector.cnn.append(data.cnn[steps])
            collector.steps.append(data.step_labels[steps])
            collector.patches.append(data.patch_labels[patches])
            collector.meta.append(data.meta[i])
    collector.save(path, {"parts": len(parts)})


def cache_path(corpora: list[Path], name: str) -> Path:
    """Where the stream set ``name`` of these corpora is cached."""
    return CACHE_DIR / f"{name}-{corpus_digest(corpora)}.npz"


def cached(corpora: list[Path], name: str, builder: Any, *args: Any) -> StreamSet:
    """The stream set ``name`` for these corpora, built first when not in the cache."""
    path = cache_path(corpora, name)
    if not path.is_file():
        log.info("building %s (cached as %s)", name, path)
        builder(read_corpora(corpora), path, *args)
    return StreamSet.load(path)
