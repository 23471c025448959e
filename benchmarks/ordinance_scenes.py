"""Long scenes whose TRUE barking just misses an ordinance rule, with confusers in the gaps:
does the shipped detector bridge a gap with a false detection and make a false finding?

    .venv/bin/python benchmarks/ordinance_scenes.py --seeds 3 [--kinds ...] [--time-limit 3000]
        [--config analyzer.toml]

``--config FILE`` is passed to ``barkwatch analyze --config``: a candidate detector (its
``[detector]``, and ``[audibility]``, ``[rules]``) is judged without replacing the bundled one;
the file's path, SHA-256 and text are in the summary line and in ``--out``.

Issue 24's goal "no false ordinance finding: gaps between bouts must not be bridged by false
detections". Each scene is mixed from the corpus (``../shared/corpus/train`` and ``extra``,
16 kHz clips) into a steady background bed, written as a 48 kHz FLAC, and analysed by
``barkwatch analyze --site FILE`` (a subprocess: the shipped detector, the CNN fused with
the sensor's fine-tuned score by ``models/dog_head.v5-fused.npz``, the rules and the
audibility with an installation record like the demo's). Scene kinds (Glencoe MN section
701 subd. 5; docs/RULES.md):

- ``near_continuous``: dog bouts of 1-3 min (real dog clips strung together 0.5-5 s apart)
  separated by 70-120 s gaps filled with confusers: every bout is under 7 min but all of them
  together are over 7 min, so one false event per gap would make a continuous finding.
  Truth: no finding.
- ``near_intermittent``: short bouts (20-40 s) every 11-14 min over 75-90 min, confusers
  between: every gap is over 10 min. Truth: no finding.
- ``continuous``: one 8-min bout (positive control). Truth: a continuous finding.
- ``intermittent``: 70 min of bouts every 5 min (positive control). Truth: an intermittent
  finding.
- ``continuous_far`` and ``intermittent_far`` (issue 39): the same seed's ``continuous`` and
  ``intermittent`` plan (the same clips, confusers and bed), but each dog clip is heard from a
  dog 20-60 m away (:func:`training.finetune.at_distance`: ISO 9613-1 air absorption, a ground
  reflection, reverberation half the time, as :func:`training.finetune.placed` draws them) and
  set 0-10 dB over the bed under it by ``placed``'s measure (RMS over the whole clip). Each scene
  gets its own installation record with the dog's distance; in ``intermittent_far`` the sensor
  stands 100 ft or more beyond the boundary, so it measures audibility there itself. Truth: the
  base kind's finding (a missed one is counted). Not in the default ``--kinds``.

Confusers are the corpus's non-dog sounds of six kinds (speech, music, birds, farm animals,
traffic, household), one after another 1-8 s apart, at levels like the barks'. The barks are
loud (72-82 dB SPL at the sensor, 8 m from the dog) so that they are plainly audible 100 ft
beyond the boundary. Printed: a JSON line per scene (findings expected and found, false events
by confuser kind, each gap's longest event-free stretch and whether it was bridged), then a
summary. The dog clips come from ``train/``, on which the CNN was trained, so recall here is
flattered; what this measures is false detections on the confusers between bouts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
import soxr

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the repository's packages
    sys.path.insert(0, str(ROOT))

from analyzer.acoustics.propagation import RECEIVER_BEYOND_BOUNDARY_M  # noqa: E402
from analyzer.config import load_analyzer_config  # noqa: E402
from analyzer.ordinance.rules import (  # noqa: E402
    INTERMITTENT,
    NS,
    RuleEvent,
    RuleSettings,
    counted_events,
)
from analyzer.ordinance.rules import evaluate as evaluate_rules  # noqa: E402
from sensor.configfile import build  # noqa: E402
from sensor.errors import ConfigError  # noqa: E402
from training.corpus import RATE, Clip, load_audio, read_manifest  # noqa: E402

log = logging.getLogger("ordinance_scenes")

DEFAULT_CORPORA = (ROOT.parent / "shared" / "corpus" / "train",
                   ROOT.parent / "shared" / "corpus" / "extra")  # fmt: skip
SCENE_RATE_HZ = 48_000
# Levels at a nominal 100 dB SPL full scale (the CNN's training calibration,
# training.trainset.mel_of_audio): `barkwatch analyze --full-scale-db 100`.
FULL_SCALE_DB = 100.0
BED_DBFS = -55.0  # a quiet suburban background, 45 dB(Z) SPL RMS
BARK_ACTIVE_DBFS = (-28.0, -18.0)  # 72-82 dB SPL: a dog barking 8 m away
CONFUSER_ACTIVE_DBFS = (-35.0, -20.0)  # 65-80 dB SPL: as loud as the barks, plainly audible
CONFUSER_MAX_S = 20.0  # longer clips (music) are cut: more kinds per gap
CONFUSER_SPACING_S = (1.0, 8.0)
BARK_SPACING_S = (0.5, 5.0)  # inside a bout: far under the 60-s continuity gap
EDGE_FADE_S = 0.02
GAP_MARGIN_S = 2.0  # confusers keep this far from a bout: a false event is plainly in a gap
SITE = {"source_to_sensor_m": 8.0, "source_to_boundary_m": 12.0, "ground": "mixed"}  # the demo's
DEVICE = "scenes"
TRUE_EVENT_TOLERANCE_S = 1.0  # an event this close to a dog clip is the dog's
CONTINUITY_GAP_S = 60.0  # analyzer.ordinance.RuleSettings' defaults (docs/RULES.md)
INTERMITTENCY_GAP_S = 600.0

# The corpus's confusers (issue 24's goal list): manifest labels of train/ and extra/.
CONFUSER_KINDS: dict[str, frozenset[str]] = {
    "speech": frozenset({"speech", "human_voice", "crowd_babble", "children_playing", "crowd"}),
    "music": frozenset({"music", "street_music"}),
    "birds": frozenset({"bird"}),
    "farm animals": frozenset({"chicken", "cow", "horse", "pig", "sheep", "goat", "donkey",
                               "rooster", "goose", "duck", "turkey"}),  # fmt: skip
    "traffic": frozenset({"traffic", "engine_idling", "car_horn", "train", "airplane",
                          "vehicle", "siren", "helicopter", "ship_horn", "bicycle"}),  # fmt: skip
    "household": frozenset({"household_appliance", "door", "door_knock", "doorbell",
                            "keyboard_typing", "footsteps", "clock_tick", "paper", "zipper",
                            "creak", "hammering", "power_tool"}),  # fmt: skip
}
BED_LABELS = frozenset({"rain", "wind", "room_tone", "indoor_ambience", "nature_ambience",
                        "insects", "air_conditioner", "water", "sea_waves"})  # fmt: skip
DOG_LABELS = frozenset({"dog_bark", "dog_howl", "dog_whine", "dog_growl"})
KINDS = ("near_continuous", "near_intermittent", "continuous", "intermittent")  # the default
# Far, quiet positive controls (issue 39 item 3): a base kind's plan with the dog far away.
FAR_BASE = {"continuous_far": "continuous", "intermittent_far": "intermittent"}
ALL_KINDS = KINDS + tuple(FAR_BASE)
FAR_SNR_DB = (0.0, 10.0)  # each dog clip over the bed under it, training.finetune.placed's RMS
FAR_BOUNDARY_M = 10.0  # dog to premises boundary: the receiver is 40.48 m from the dog
# Dog to sensor per scene. The continuous rule counts every event (docs/RULES.md), so any
# distance is honest; the intermittent one counts plainly audible events, so the sensor stands
# at or beyond the receiver (>= 40.48 m) and measures audibility there (docs/AUDIBILITY.md).
FAR_SENSOR_M = {"continuous_far": (21.0, 59.0), "intermittent_far": (41.5, 59.0)}
FAR_WANDER_M = 1.0  # each clip within this of the scene's distance: the record's uncertainty
FAR_GROUND_FACTOR = (0.6, 0.9)  # training.finetune.placed's draw (grass): 'mixed' covers it
FAR_GROUND = "mixed"
FAR_REVERBERANT_SHARE = 0.5  # as training.finetune.placed


class SceneError(Exception):
    """A corpus that cannot make a scene (no dog clips, no bed, ...)."""


@dataclass(frozen=True)
class FarDog:
    """How one dog clip of a far control is heard at the sensor."""

    distance_m: float  # dog to microphone
    snr_db: float  # the clip's RMS over the bed's RMS under it (training.finetune.placed)
    ground_factor: float  # training.finetune.at_distance's reflection factor
    reverberant: bool


@dataclass(frozen=True)
class FarField:
    """A far control's installation geometry and its dog clips' placing (in the order of the
    scene's dog placements)."""

    sensor_m: float  # dog's spot to the sensor: the record's source_to_sensor_m
    boundary_m: float  # dog's spot to the premises boundary
    dogs: tuple[FarDog, ...]


@dataclass(frozen=True)
class Placement:
    """One clip in a scene: seconds from its start, what it is."""

    start_s: float
    end_s: float
    kind: str  # "dog" or a confuser kind
    label: str
    clip_id: str


@dataclass
class Scene:
    """A scene's plan: its clips, its dog bouts and the findings its truth implies."""

    name: str
    kind: str
    seed: int
    duration_s: float
    bouts: list[tuple[float, float]] = field(default_factory=list)
    placements: list[Placement] = field(default_factory=list)
    expected: dict[str, bool] = field(default_factory=dict)  # rule -> a finding expected
    far: FarField | None = None  # far controls only; the others' plans (and digests) lack it

    @property
    def gaps(self) -> list[tuple[float, float]]:
        """The stretches between consecutive bouts (the truth's gaps)."""
        return [(a[1], b[0]) for a, b in zip(self.bouts, self.bouts[1:], strict=False)]


@dataclass(frozen=True)
class Sound:
    """A clip the scenes draw from."""

    clip_id: str
    label: str


class Material:
    """Dog clips, confusers by kind and bed recordings (16 kHz); audio read once each.

    :meth:`from_corpora` takes them from corpus folders; :meth:`from_audio` from arrays."""

    def __init__(self, dogs: list[Sound], confusers: dict[str, list[Sound]], beds: list[Sound],
                 read: Callable[[str], np.ndarray]) -> None:  # fmt: skip
        empty = [k for k, v in {"dog": dogs, "bed": beds, **confusers}.items() if not v]
        if empty:
            raise SceneError("no clips of: " + ", ".join(empty))
        self.dogs, self.confusers, self.beds = dogs, confusers, beds
        self._read = read
        self._audio: dict[str, np.ndarray] = {}

    @classmethod
    def from_corpora(cls, corpora: Sequence[Path]) -> Material:
        """The corpora's dog vocalizations, confusers (CONFUSER_KINDS) and beds (BED_LABELS,
        at least 4 s long)."""
        clips: list[Clip] = []
        for corpus in corpora:
            if not (corpus / "manifest.csv").is_file():
                raise SceneError(f"{corpus}: no manifest.csv (a corpus folder, e.g. "
                                 "../shared/corpus/train)")
            clips += read_manifest(corpus)
        clips.sort(key=lambda c: c.clip_id)
        paths = {c.clip_id: c.path for c in clips}

        def pick(keep: Callable[[Clip], bool]) -> list[Sound]:
            return [Sound(c.clip_id, c.label) for c in clips if keep(c)]

        try:
            return cls(
                pick(lambda c: c.is_dog and c.label in DOG_LABELS),
                {kind: pick(lambda c, labels=labels: not c.is_dog and c.label in labels)  # type: ignore[misc]
                 for kind, labels in CONFUSER_KINDS.items()},
                pick(lambda c: c.label in BED_LABELS and c.duration_s >= 4.0),
                lambda clip_id: load_audio(paths[clip_id]),
            )  # fmt: skip
        except SceneError as exc:
            raise SceneError(f"the corpora {', '.join(map(str, corpora))}: {exc}") from exc

    @classmethod
    def from_audio(cls, dogs: dict[str, np.ndarray], confusers: dict[str, dict[str, np.ndarray]],
                   beds: dict[str, np.ndarray]) -> Material:  # fmt: skip
        """Clips given as 16 kHz arrays by id (confusers by kind, then id)."""
        audio = {**dogs, **beds, **{k: v for c in confusers.values() for k, v in c.items()}}
        return cls([Sound(k, "dog") for k in dogs],
                   {kind: [Sound(k, kind) for k in c] for kind, c in confusers.items()},
                   [Sound(k, "bed") for k in beds], lambda clip_id: audio[clip_id])  # fmt: skip

    def audio(self, clip_id: str) -> np.ndarray:
        """The clip at 16 kHz (float32), read once."""
        if clip_id not in self._audio:
            self._audio[clip_id] = np.asarray(self._read(clip_id), dtype=np.float32)
        return self._audio[clip_id]

    def duration_s(self, clip_id: str) -> float:
        return len(self.audio(clip_id)) / RATE


# ---------------------------------------------------------------- planning (seeded, no audio)


def _dog_bout(rng: np.random.Generator, material: Material, start_s: float, length_s: float,
              out: list[Placement]) -> tuple[float, float]:  # fmt: skip
    """Dog clips strung together from ``start_s`` for about ``length_s``; the bout's span."""
    t = start_s
    end = start_s
    while True:
        clip = material.dogs[int(rng.integers(len(material.dogs)))]
        dur = material.duration_s(clip.clip_id)
        if end > start_s and t + dur > start_s + length_s:
            break
        out.append(Placement(t, t + dur, "dog", clip.label, clip.clip_id))
        end = t + dur
        t = end + float(rng.uniform(*BARK_SPACING_S))
    return start_s, end


def _confusers(rng: np.random.Generator, material: Material, start_s: float, end_s: float,
               out: list[Placement]) -> None:  # fmt: skip
    """Confusers one after another between ``start_s`` and ``end_s``, the kinds taken in a
    shuffled round so that every kind appears in a long gap."""
    kinds = list(material.confusers)
    order: list[str] = []
    t = start_s + float(rng.uniform(*CONFUSER_SPACING_S))
    while True:
        if not order:
            order = [kinds[i] for i in rng.permutation(len(kinds))]
        kind = order.pop()
        pool = material.confusers[kind]
        clip = pool[int(rng.integers(len(pool)))]
        dur = min(material.duration_s(clip.clip_id), CONFUSER_MAX_S)
        if t + dur > end_s:
            return
        out.append(Placement(t, t + dur, kind, clip.label, clip.clip_id))
        t += dur + float(rng.uniform(*CONFUSER_SPACING_S))


def plan_bouts(name: str, kind: str, seed: int, material: Material,
               bouts: Sequence[tuple[float, float]], duration_s: float,
               expected: dict[str, bool]) -> Scene:  # fmt: skip
    """A scene of dog bouts (start, length in s) with confusers everywhere else."""
    rng = np.random.default_rng([seed, KINDS.index(kind) if kind in KINDS else 99])
    scene = Scene(name, kind, seed, duration_s, expected=expected)
    dogs: list[Placement] = []
    for start, length in bouts:
        scene.bouts.append(_dog_bout(rng, material, start, length, dogs))
    others: list[Placement] = []
    edges = [0.0] + [t for bout in scene.bouts for t in bout] + [duration_s]
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        lo = a + (GAP_MARGIN_S if a > 0 else 0.0)
        _confusers(rng, material, lo, b - GAP_MARGIN_S, others)
    scene.placements = sorted(dogs + others, key=lambda p: p.start_s)
    return scene


def plan_far(kind: str, seed: int, base: Scene) -> Scene:
    """``base`` (a control) with its dog heard far away: the geometry and each clip's placing
    drawn from ``seed``; clips, confusers and bed stay the base's."""
    rng = np.random.default_rng([seed, 2000 + ALL_KINDS.index(kind)])
    sensor_m = round(float(rng.uniform(*FAR_SENSOR_M[kind])), 1)  # as the record states it
    dogs = tuple(FarDog(distance_m=sensor_m + float(rng.uniform(-FAR_WANDER_M, FAR_WANDER_M)),
                        snr_db=float(rng.uniform(*FAR_SNR_DB)),
                        ground_factor=float(rng.uniform(*FAR_GROUND_FACTOR)),
                        reverberant=bool(rng.random() < FAR_REVERBERANT_SHARE))
                 for p in base.placements if p.kind == "dog")  # fmt: skip
    return replace(base, name=f"{kind}-s{seed}", kind=kind,
                   far=FarField(sensor_m, FAR_BOUNDARY_M, dogs))  # fmt: skip


def plan_scene(kind: str, seed: int, material: Material) -> Scene:
    """One scene of ``kind`` (see the module docstring), drawn from ``seed``."""
    if kind in FAR_BASE:
        return plan_far(kind, seed, plan_scene(FAR_BASE[kind], seed, material))
    rng = np.random.default_rng([seed, 1000 + KINDS.index(kind)])
    lead = 30.0
    if kind == "near_continuous":
        bouts, t = [], lead
        for _ in range(5):  # 5 bouts of 1-3 min: 5-15 min of barking, never 7 in one bout
            length = float(rng.uniform(60.0, 180.0))
            bouts.append((t, length))
            t += length + float(rng.uniform(70.0, 120.0))
        duration = t
        expected = {"continuous": False, "intermittent": False}
    elif kind == "near_intermittent":
        span = float(rng.uniform(75.0, 90.0)) * 60
        bouts, t = [], lead
        while t + 40.0 < span:
            bouts.append((t, float(rng.uniform(20.0, 40.0))))
            t += float(rng.uniform(11.0, 14.0)) * 60  # start to start: gaps over 10 min
        duration = span + lead
        expected = {"continuous": False, "intermittent": False}
    elif kind == "continuous":
        bouts = [(60.0, 480.0)]
        duration = 60.0 + 480.0 + 60.0
        expected = {"continuous": True, "intermittent": False}
    elif kind == "intermittent":
        bouts = [(60.0 + k * 300.0, float(rng.uniform(20.0, 40.0))) for k in range(15)]
        duration = 60.0 + 14 * 300.0 + 40.0 + 60.0  # first to last bout: 70 min
        expected = {"continuous": False, "intermittent": True}
    else:
        raise SceneError(f"unknown scene kind {kind!r}; one of {', '.join(ALL_KINDS)}")
    return plan_bouts(f"{kind}-s{seed}", kind, seed, material, bouts, duration, expected)


# ---------------------------------------------------------------------------------- rendering


def _active_rms(audio: np.ndarray) -> float:
    """RMS over the loudest quarter of 20-ms steps: a clip's level while it sounds, so that a
    bark with silence around it is scaled by the bark, not by the silence."""
    hop = RATE // 50
    n = max(1, len(audio) // hop)
    steps = np.mean(np.square(audio[: n * hop].reshape(n, -1) if len(audio) >= hop
                              else audio[None, :]), axis=1)  # fmt: skip
    loud = np.sort(steps)[-max(1, n // 4):]
    return math.sqrt(float(np.mean(loud))) + 1e-12


def _faded(audio: np.ndarray) -> np.ndarray:
    out = audio.astype(np.float32, copy=True)
    n = min(round(EDGE_FADE_S * RATE), len(out) // 2)
    if n:
        ramp = np.sin(np.linspace(0.0, np.pi / 2, n, dtype=np.float32)) ** 2
        out[:n] *= ramp
        out[len(out) - n:] *= ramp[::-1]
    return out


def _bed(rng: np.random.Generator, material: Material, n: int) -> np.ndarray:
    """Bed recordings one after another (0.5-s crossfades), each at BED_DBFS RMS."""
    out = np.zeros(n, np.float32)
    fade = RATE // 2
    at = 0
    while at < n:
        clip = material.beds[int(rng.integers(len(material.beds)))]
        piece = material.audio(clip.clip_id)
        piece = piece * np.float32(10 ** (BED_DBFS / 20) / (np.sqrt(np.mean(piece**2)) + 1e-12))
        ramp = np.linspace(0.0, 1.0, min(fade, len(piece) // 2), dtype=np.float32)
        piece[: len(ramp)] *= ramp
        piece[len(piece) - len(ramp):] *= ramp[::-1]
        end = min(n, at + len(piece))
        out[at:end] += piece[: end - at]
        at = end - len(ramp) if end < n else n
    return out


def _far_piece(audio: np.ndarray, bed_under: np.ndarray, dog: FarDog,
               reverb_seed: list[int]) -> np.ndarray:  # fmt: skip
    """A dog clip as heard ``dog.distance_m`` away (:func:`training.finetune.at_distance`), set
    ``dog.snr_db`` over ``bed_under`` by :func:`training.finetune.placed`'s measure: the RMS of
    the whole heard clip over the RMS of the bed under it."""
    from training.finetune import at_distance, rms  # torch: loaded for the far controls only

    reverb = np.random.default_rng(reverb_seed) if dog.reverberant else None
    heard = at_distance(_faded(audio).astype(np.float64), dog.distance_m, dog.ground_factor,
                        reverb)  # fmt: skip
    heard = _faded(heard)  # the reverberation is cut at the clip's end: no click
    gain = rms(bed_under) * 10 ** (dog.snr_db / 20) / max(rms(heard), 1e-9)
    return heard * np.float32(gain)


def render(scene: Scene, material: Material, path: Path, rate_hz: int = SCENE_RATE_HZ) -> Path:
    """Mix the scene (16 kHz) and write it as 16-bit FLAC at ``rate_hz`` (soxr, streamed in
    one-minute pieces so memory stays with the 16 kHz mix)."""
    mixed = FAR_BASE.get(scene.kind, scene.kind)  # a far control: its base's bed and confusers
    rng = np.random.default_rng([scene.seed, 7919, KINDS.index(mixed)
                                 if mixed in KINDS else 99])  # fmt: skip
    n = round(scene.duration_s * RATE)
    mix = _bed(rng, material, n)
    far_dogs = 0
    for p in scene.placements:
        audio = material.audio(p.clip_id)[: round((p.end_s - p.start_s) * RATE)]
        span = BARK_ACTIVE_DBFS if p.kind == "dog" else CONFUSER_ACTIVE_DBFS
        # drawn for a far dog too, unused: the confusers' levels stay the base scene's
        gain = 10 ** (float(rng.uniform(*span)) / 20) / _active_rms(audio)
        first = round(p.start_s * RATE)
        if scene.far is not None and p.kind == "dog":
            # only the bed lies under a dog clip (clips never overlap; confusers keep off bouts)
            piece = _far_piece(audio, mix[first : first + len(audio)], scene.far.dogs[far_dogs],
                               [scene.seed, 7919, ALL_KINDS.index(scene.kind), far_dogs])
            far_dogs += 1
        else:
            piece = _faded(audio) * np.float32(gain)
        mix[first : first + len(piece)] += piece[: n - first]
    peak = float(np.max(np.abs(mix)))
    if peak > 0.99:  # the barks are loud: never clip the 16-bit file
        mix *= np.float32(0.99 / peak)
    path.parent.mkdir(parents=True, exist_ok=True)
    stream = None if rate_hz == RATE else soxr.ResampleStream(RATE, rate_hz, 1, dtype="float32")
    with soundfile.SoundFile(str(path), "w", rate_hz, 1, "PCM_16", format="FLAC") as out:
        step = 60 * RATE
        for k in range(0, n, step):
            block = mix[k : k + step]
            last = k + step >= n
            out.write(block if stream is None else stream.resample_chunk(block, last=last))
    return path


def site_record(path: Path, far: FarField | None = None) -> Path:
    """An installation record written by ``barkwatch site create``: the demo's (dog 8 m from
    the sensor, 12 m from the boundary), or a far control's geometry (``FAR_GROUND``)."""
    sensor_m, boundary_m, ground = ((SITE["source_to_sensor_m"], SITE["source_to_boundary_m"],
                                     SITE["ground"]) if far is None else
                                    (far.sensor_m, far.boundary_m, FAR_GROUND))  # fmt: skip
    subprocess.run([str(ROOT / ".venv" / "bin" / "barkwatch"), "site", "create", str(path),
                    "--device", DEVICE, "--address", "1 Scene Street",
                    "--sensor-m", str(sensor_m), "--boundary-m", str(boundary_m),
                    "--ground", str(ground), "--force"],
                   check=True, capture_output=True, text=True)  # fmt: skip
    return path


def analyze_cli(audio: Path, site: Path, config: Path | None = None) -> dict[str, Any]:
    """``barkwatch analyze --site [--config]`` on the scene: its JSON document."""
    options = ["--config", str(config)] if config is not None else []
    run = subprocess.run([str(ROOT / ".venv" / "bin" / "barkwatch"), "analyze", "--quiet",
                          "--full-scale-db", str(FULL_SCALE_DB), "--site", str(site), *options,
                          str(audio)], capture_output=True, text=True)  # fmt: skip
    if run.returncode != 0:
        raise SceneError(f"barkwatch analyze {audio} failed ({run.returncode}): {run.stderr}")
    document: dict[str, Any] = json.loads(run.stdout)
    return document


# --------------------------------------------------------------------------------- evaluation


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _longest_free(gap: tuple[float, float], events: list[tuple[float, float]]) -> float:
    """The longest stretch of ``gap`` that no event covers, s."""
    t, longest = gap[0], 0.0
    for on, off in sorted(events):
        if off <= gap[0] or on >= gap[1]:
            continue
        longest = max(longest, on - t)
        t = max(t, off)
    return max(longest, gap[1] - t)


def _rule_events(document: dict[str, Any]) -> list[RuleEvent]:
    """The document's events as the rules take them (levels are not needed here)."""
    return [RuleEvent("scene", round(e["onset_s"] * NS), round(e["offset_s"] * NS),
                      str(e.get("label", "dog")), 0.0, 0.0, 0.0, "",
                      plainly_audible=e.get("plainly_audible"))
            for e in document["events"]]


def _counted_intermittent(document: dict[str, Any]) -> set[tuple[float, float]]:
    """(onset_s, offset_s) of the document's events the intermittent rule counts under the
    analysis' own rule settings (``document["rules"]``)."""
    settings = build(RuleSettings, document.get("rules", {}))
    events = _rule_events(document)
    by_key = {(e.onset_ns, e.offset_ns): (d["onset_s"], d["offset_s"])
              for e, d in zip(events, document["events"], strict=True)}
    return {by_key[(e.onset_ns, e.offset_ns)]
            for e in counted_events(INTERMITTENT, settings, events)}


def _found_alone(document: dict[str, Any], duration_s: float) -> dict[str, bool]:
    """The findings the same events make when every plainly audible event counts alone
    (``intermittent_company_s = 0``, the reading before issue 39), for comparison."""
    settings = replace(build(RuleSettings, document.get("rules", {})),
                       intermittent_company_s=0.0)
    findings = evaluate_rules("scene", _rule_events(document),
                              [(0, round(duration_s * NS) + NS)], settings)
    return {rule: any(f.rule == rule for f in findings)
            for rule in ("continuous", "intermittent")}


def evaluate(scene: Scene, document: dict[str, Any]) -> dict[str, Any]:
    """What the analysis found against the scene's truth."""
    dogs = [p for p in scene.placements if p.kind == "dog"]
    tol = TRUE_EVENT_TOLERANCE_S
    false_events = []
    true_count = true_audible = 0
    heard: set[int] = set()  # dog clips an event overlaps (within the tolerance)
    for e in document["events"]:
        on, off = e["onset_s"], e["offset_s"]
        mine = {k for k, p in enumerate(dogs) if _overlap(on, off, p.start_s - tol,
                                                          p.end_s + tol) > 0}  # fmt: skip
        if mine:
            true_count += 1
            true_audible += bool(e.get("plainly_audible"))
            heard |= mine
            continue
        best = max((p for p in scene.placements if p.kind != "dog"),
                   key=lambda p: _overlap(on, off, p.start_s, p.end_s), default=None)  # fmt: skip
        near = best is not None and _overlap(on, off, best.start_s, best.end_s) > 0
        false_events.append({
            "onset_s": on, "offset_s": off, "confidence": e["confidence"],
            "plainly_audible": e.get("plainly_audible"),
            "confuser": best.kind if near and best else "bed",
            "label": best.label if near and best else "",
            "clip_id": best.clip_id if near and best else "",
        })  # fmt: skip
    by_kind: dict[str, int] = {}
    for f in false_events:
        by_kind[f["confuser"]] = by_kind.get(f["confuser"], 0) + 1
    spans = [(f["onset_s"], f["offset_s"]) for f in false_events]
    # The intermittent rule counts plainly audible events in company (issue 39): a false one
    # bridges a gap only when counted (another counted event, true or false, near it).
    counted = _counted_intermittent(document)
    audible = [(f["onset_s"], f["offset_s"]) for f in false_events
               if (f["onset_s"], f["offset_s"]) in counted]
    gaps = []
    for gap in scene.gaps:
        inside = [s for s in spans if _overlap(*s, *gap) > 0]
        free_all = _longest_free(gap, spans)
        free_audible = _longest_free(gap, audible)
        rule_gap = CONTINUITY_GAP_S if FAR_BASE.get(scene.kind, scene.kind) in (
            "near_continuous", "continuous") else INTERMITTENCY_GAP_S
        free = free_all if rule_gap == CONTINUITY_GAP_S else free_audible
        gaps.append({"start_s": round(gap[0], 2), "end_s": round(gap[1], 2),
                     "length_s": round(gap[1] - gap[0], 2), "false_events": len(inside),
                     "longest_free_s": round(free, 2),
                     # truth's gap is over the rule's gap; false events leave none that long
                     "bridged": gap[1] - gap[0] >= rule_gap and free < rule_gap})  # fmt: skip
    found = {rule: any(f["rule"] == rule for f in document["findings"])
             for rule in ("continuous", "intermittent")}  # fmt: skip
    # How near a false finding came: the longest run of bouts joined by bridged gaps, from
    # the first one's start to the last one's end (a finding needs more than the rule's limit)
    longest, run_start = 0.0, None
    for k, bout in enumerate(scene.bouts):
        run_start = bout[0] if run_start is None else run_start
        longest = max(longest, bout[1] - run_start)
        if k == len(gaps) or not gaps[k]["bridged"]:
            run_start = None
    far = None if scene.far is None else {
        "sensor_m": scene.far.sensor_m, "boundary_m": scene.far.boundary_m,
        "sensor_beyond_receiver": (scene.far.sensor_m
                                   >= scene.far.boundary_m + RECEIVER_BEYOND_BOUNDARY_M),
        "distance_m": [round(min(d.distance_m for d in scene.far.dogs), 1),
                       round(max(d.distance_m for d in scene.far.dogs), 1)],
        "snr_db": [round(min(d.snr_db for d in scene.far.dogs), 1),
                   round(max(d.snr_db for d in scene.far.dogs), 1)],
    }  # fmt: skip
    return {
        "scene": scene.name, "kind": scene.kind, "seed": scene.seed,
        "duration_s": round(scene.duration_s, 1), "bouts": len(scene.bouts),
        "model_version": document.get("model_version"), "far": far,
        "dog_clips": len(dogs), "dog_clips_heard": len(heard),
        "confuser_clips": len(scene.placements) - len(dogs),
        "expected": scene.expected, "found": found,
        "correct": found == scene.expected,
        "found_alone": _found_alone(document, scene.duration_s),
        "findings": [{k: f[k] for k in ("rule", "start_s", "end_s", "duration_s")}
                     for f in document["findings"]],  # fmt: skip
        "events": len(document["events"]), "true_events": true_count,
        "true_events_plainly_audible": true_audible,
        "false_events": len(false_events), "false_by_confuser": by_kind,
        "false_detail": false_events,
        "gaps": gaps, "gaps_bridged": sum(g["bridged"] for g in gaps),
        "longest_bridged_s": round(longest, 1),
        "bout_spans_s": [[round(a, 2), round(b, 2)] for a, b in scene.bouts],
    }


def scene_digest(scene: Scene) -> str:
    """Names the cached audio of a plan (and of the mixing recipe's constants). A scene that is
    not a far control hashes as before the far controls existed: its cached audio stays."""
    plan = asdict(scene)
    far = plan.pop("far")
    recipe: list[Any] = [BED_DBFS, BARK_ACTIVE_DBFS, CONFUSER_ACTIVE_DBFS, SCENE_RATE_HZ,
                         EDGE_FADE_S, 1]  # fmt: skip
    if far is not None:
        recipe.append({"far": far, "far_recipe": 1})  # training.finetune.at_distance's
    text = json.dumps([plan, *recipe])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def run_scenes(kinds: Sequence[str], seeds: Sequence[int], material: Material, workdir: Path,
               time_limit_s: float, emit: Callable[[dict[str, Any]], None],
               config: Path | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Plan, render, analyse (with the analyzer configuration ``config`` when given) and judge
    each scene until ``time_limit_s`` has passed."""
    demo_site = site_record(workdir / "site.toml")
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    for seed in seeds:
        for kind in kinds:
            if time.monotonic() - started > time_limit_s:
                log.warning("time limit %.0f s reached: %s seed %d and later not run",
                            time_limit_s, kind, seed)  # fmt: skip
                return results
            scene = plan_scene(kind, seed, material)
            audio = workdir / f"{scene.name}-{scene_digest(scene)}.flac"
            t0 = time.monotonic()
            if not audio.exists():
                render(scene, material, audio)
            t1 = time.monotonic()
            site = demo_site if scene.far is None else site_record(
                workdir / f"site-{scene.name}.toml", scene.far)  # the scene's own geometry
            result = evaluate(scene, analyze_cli(audio, site, config))
            result["render_s"] = round(t1 - t0, 1)
            result["analyze_s"] = round(time.monotonic() - t1, 1)
            emit(result)
            results.append(result)
    return results


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals per scene kind."""
    out: dict[str, Any] = {}
    for kind in ALL_KINDS:
        mine = [r for r in results if r["kind"] == kind]
        if not mine:
            continue
        hours = sum(r["duration_s"] for r in mine) / 3600
        by_kind: dict[str, int] = {}
        for r in mine:
            for k, v in r["false_by_confuser"].items():
                by_kind[k] = by_kind.get(k, 0) + v
        out[kind] = {
            "scenes": len(mine), "hours": round(hours, 2),
            "dog_clips": sum(r["dog_clips"] for r in mine),
            "dog_clips_heard": sum(r["dog_clips_heard"] for r in mine),
            "correct": sum(r["correct"] for r in mine),
            "false_findings": sum(any(r["found"][k] and not r["expected"][k] for k in r["found"])
                                  for r in mine),  # fmt: skip
            "missed_findings": sum(any(r["expected"][k] and not r["found"][k] for k in r["found"])
                                   for r in mine),  # fmt: skip
            # the same events with every plainly audible event counting alone (before issue 39)
            "false_findings_alone": sum(any(r["found_alone"][k] and not r["expected"][k]
                                            for k in r["found_alone"]) for r in mine),
            "missed_findings_alone": sum(any(r["expected"][k] and not r["found_alone"][k]
                                             for k in r["found_alone"]) for r in mine),
            "false_events": sum(r["false_events"] for r in mine),
            "false_events_per_hour": round(sum(r["false_events"] for r in mine) / hours, 2),
            "false_by_confuser": by_kind,
            "gaps": sum(len(r["gaps"]) for r in mine),
            "gaps_with_false_events": sum(g["false_events"] > 0 for r in mine for g in r["gaps"]),
            "gaps_bridged": sum(r["gaps_bridged"] for r in mine),
            "longest_bridged_s": max(r["longest_bridged_s"] for r in mine),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Make long 48 kHz scenes from the corpus in which true barking just misses "
        "an ordinance rule (confusers in the gaps), plus positive controls; run each through "
        "`barkwatch analyze --site` and report findings expected and found, false events in "
        "the gaps and whether any gap was bridged. One JSON line per scene, then a summary.")
    parser.add_argument("--corpus", type=Path, action="append",
                        help="corpus folder with manifest.csv (repeatable; default "
                        "../shared/corpus/train and ../shared/corpus/extra)")  # fmt: skip
    parser.add_argument("--kinds", nargs="+", choices=ALL_KINDS, default=list(KINDS),
                        help="scene kinds (default the four of issue 24: %(default)s; the far "
                        "controls continuous_far and intermittent_far only when named)")
    parser.add_argument("--config", type=Path,
                        help="analyzer configuration for `barkwatch analyze --config` (its "
                        "[detector], [audibility], [rules]): judge a candidate detector")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..N per kind (default 3)")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path,
                        default=Path.home() / ".cache" / "barkwatch" / "ordinance-scenes",
                        help="where the scenes' audio is cached (default %(default)s)")
    parser.add_argument("--time-limit", type=float, default=3600.0,
                        help="start no scene after this many seconds (default %(default)s)")
    parser.add_argument("--out", type=Path, help="also write the results here (JSON)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    try:
        material = Material.from_corpora(args.corpus or list(DEFAULT_CORPORA))
    except SceneError as exc:
        parser.error(str(exc))
    config = None
    if args.config is not None:
        try:
            load_analyzer_config(str(args.config))  # a bad file fails here, not per scene
            text = args.config.read_text(encoding="utf-8")
        except (ConfigError, OSError, UnicodeDecodeError) as exc:
            parser.error(f"--config {args.config}: {exc}")
        config = {"path": str(args.config.resolve()),
                  "sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text}
    args.workdir.mkdir(parents=True, exist_ok=True)
    seeds = range(args.first_seed, args.first_seed + args.seeds)

    def emit(result: dict[str, Any]) -> None:
        brief = {k: v for k, v in result.items() if k != "false_detail"}
        sys.stdout.write(json.dumps(brief) + "\n")
        sys.stdout.flush()

    try:
        results = run_scenes(args.kinds, seeds, material, args.workdir, args.time_limit, emit,
                             args.config)  # fmt: skip
    except SceneError as exc:
        print(f"ordinance_scenes: error: {exc}", file=sys.stderr)
        return 1
    total = {"summary": summary(results), "config": config}
    sys.stdout.write(json.dumps(total) + "\n")
    if args.out:
        args.out.write_text(json.dumps({"scenes": results, **total}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
