"""What the wire carries around each utterance of a stream, as fixed-size vectors per field.

The stream (:mod:`training.privacy_stream`) goes through the sensor's own code at its capture
rate — ``FrameBuilder`` with ``SensorNetworks``, as the sensor runs them — and every frame
through ``encode_frame`` and ``decode_frame``: the attacks see what an analyzer receives, in
whichever wire version the installed ``sensor`` package speaks. Nothing here knows how the
sensor computes a field. Every numeric field of the decoded :class:`~sensor.wire.Frame` is
taken (scalars, and arrays flattened), except those that describe the frame rather than the
sound (:data:`NOT_SOUND`); a field the wire leaves empty or absent in a frame reads as zeros,
so a group of fields that is empty on the wire gives the classifier nothing (chance).

An utterance's vector, field by field, aligned on its onset where the wire says when a value
was measured: the time series inside a frame (``dog_s`` per 20 ms step, the 0.5 s envelope
blocks) from 0.5 s before the onset for 2 s, each element in the slot its start time says;
the per-patch fields (YAMNet's embeddings and scores, a patch every 0.48 s) the
``PATCH_SLOTS`` patches starting in the 1.92 s from 0.96 s before the onset; every other field
(levels, bands: one per second) from the ``FRAMES`` frames from the one the onset falls in,
each padded with zeros to the field's largest size in the stream. Utterances of the Free
Spoken Digit Dataset last 0.42 s in the median and under 1 s in 99 %, so these windows cover
them. The onset is given to the attacker: an upper bound on what one who must first find the
speech can do.

Feature groups (:data:`GROUPS`) name fields of the wire; a field not named in any goes into
``all`` only (and is logged), so a new wire version is measured without a change here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.privacy_stream import (
    Placement,
    StreamConditions,
    Utterance,
    stream_blocks,
    stream_seconds,
)

log = logging.getLogger(__name__)

FRAMES = 2  # frames per utterance, from the one holding its onset
PATCH_SLOTS = 4  # patches per utterance: those starting from 0.96 s before the onset
PATCH_LEAD_S = 0.96
# Fields that describe the frame, its device or its timing, not the sound: left out.
NOT_SOUND = frozenset({
    "device_id", "seq", "capture_ns", "sample_rate", "n_samples", "full_scale_db",
    "calibration_date", "hop_s", "envelope_hop_s", "patch_start_ns", "model_versions",
    "clock_step_ns", "band_first_index", "percentile_window_s", "gate",
})  # fmt: skip
# Fields with one row per YAMNet patch (wire: ``emb``, ``ys``, ``dg``).
PATCH_FIELDS = frozenset({"embeddings", "class_scores", "patch_dog_scores"})
# Time series within a frame, with the field giving their step (``dog_s``, ``laeq_s``, ``laf_s``)
SERIES_FIELDS = {"dog_steps": "hop_s", "laeq_blocks_db": "envelope_hop_s",
                 "laf_blocks_db": "envelope_hop_s"}  # fmt: skip
SERIES_LEAD_S = 0.5  # a time series' window: from 0.5 s before the onset ...
SERIES_SPAN_S = 2.0  # ... for 2 s
SPECTRUM_FIELDS = frozenset({"bands_db", "laeq_blocks_db", "laf_blocks_db", "background"})
LEVEL = "level"  # the group of every scalar field (a sound level meter's display)
GROUPS: dict[str, frozenset[str] | None] = {
    "all": None,
    "bands+envelopes+levels": SPECTRUM_FIELDS | {LEVEL},
    "levels": frozenset({LEVEL}),
    "embeddings": frozenset({"embeddings"}),
    "class scores": frozenset({"class_scores"}),
    "dog scores": frozenset({"dog_steps", "patch_dog_scores"}),
}
Progress = Callable[[float, float], None]


class FeatureError(ValueError):
    """Frames or a cache that features cannot be taken from; the message says which."""


@dataclass(frozen=True)
class Features:
    """Per field, one row per utterance (``fields[name]``: utterances x width, float32);
    ``scalar`` names the fields that are one number per frame; labels per utterance."""

    fields: dict[str, np.ndarray]
    scalar: frozenset[str]
    clip_ids: tuple[str, ...]
    words: tuple[str, ...]
    speakers: tuple[str, ...]
    sessions: tuple[str, ...]
    wire_version: int
    # what the frames around the utterances were sent as (wire v3's ``gate``), frames by kind
    frame_kinds: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.clip_ids)

    def group_fields(self, group: str) -> list[str]:
        """The fields of ``group`` (:data:`GROUPS`) that the frames had, in name order."""
        if group not in GROUPS:
            raise FeatureError(f"no feature group {group!r}: one of {', '.join(GROUPS)}")
        members = GROUPS[group]
        return sorted(name for name in self.fields if members is None or name in members
                      or (LEVEL in members and name in self.scalar))  # fmt: skip

    def matrix(self, group: str) -> np.ndarray:
        """The group's fields side by side (utterances x columns); a group with no field on
        the wire gives one column of zeros: nothing to learn from."""
        names = [name for name in self.group_fields(group) if self.fields[name].shape[1]]
        if not names:
            return np.zeros((self.n, 1), dtype=np.float32)
        # a level a frame did not carry (NaN, in caches made before it was left out) reads 0
        return np.nan_to_num(np.concatenate([self.fields[name] for name in names], axis=1))

    def carried(self, group: str) -> bool:
        """Whether any field of the group holds anything but zeros."""
        return any(bool(np.any(self.fields[name])) for name in self.group_fields(group))


def frame_values(frame: Any) -> dict[str, np.ndarray]:
    """Every numeric field of a decoded frame that depends on the sound, as float32 arrays
    (scalars of size 1, per-patch fields as rows, other arrays flattened); absent (None) and
    non-numeric fields left out."""
    from sensor.wire import BandBackground

    out: dict[str, np.ndarray] = {}
    for spec in dataclasses.fields(frame):
        if spec.name in NOT_SOUND:
            continue
        value = getattr(frame, spec.name)
        if isinstance(value, np.ndarray):
            array: np.ndarray = value.astype(np.float32)
            if spec.name in PATCH_FIELDS:  # rows of patches; none: zero rows of their width
                width = int(np.prod(array.shape[1:])) if array.ndim > 1 else 1
                out[spec.name] = array.reshape(array.shape[0] if array.ndim else 1, width)
            else:
                out[spec.name] = array.reshape(-1)
        elif isinstance(value, BandBackground):  # the background statistics (wire v4)
            out[spec.name] = np.asarray(value.bands_db, np.float32).reshape(-1)
        elif isinstance(value, bool | int | float) and not (
                isinstance(value, float) and math.isnan(value)):  # NaN: a level not sent
            out[spec.name] = np.array([float(value)], dtype=np.float32)
    return out


def wire_frames(blocks: Iterable[np.ndarray], conditions: StreamConditions) -> Iterable[Any]:
    """The stream's frames as an analyzer decodes them: the sensor's ``FrameBuilder`` and
    ``SensorNetworks`` at the stream's rate, each frame through ``encode_frame`` and
    ``decode_frame``; capture starts at time 0."""
    from sensor.frames import FrameBuilder
    from sensor.scoring import SensorNetworks
    from sensor.wire import decode_frame, encode_frame

    networks = SensorNetworks(conditions.rate)
    builder = FrameBuilder("privacy", conditions.rate, conditions.full_scale_db, 0,
                           networks=networks)  # fmt: skip
    for block in blocks:
        for frame in builder.push(block):
            yield decode_frame(encode_frame(frame))
    for frame in builder.finish():
        yield decode_frame(encode_frame(frame))


def _timed_hop_s(frame: Any, name: str) -> float | None:
    """Seconds between the elements of a timed field of ``frame`` (the wire's contract: patch
    i at ``p0 + i * 0.48 s``, ``dog_s`` step k at ``t + k * hop``, envelope block k at
    ``t + k * env_hop``); None for a field that is not a time series (bands, levels)."""
    from sensor.wire import PATCH_HOP_NS

    if name in PATCH_FIELDS:
        return PATCH_HOP_NS / 1e9
    hop = getattr(frame, SERIES_FIELDS.get(name, ""), None)
    return None if hop is None else float(hop)


@dataclass
class _Timeline:
    """The decoded frames' values: per frame index (second), and for the timed fields every
    element (or patch row) with its start time."""

    frames: dict[int, dict[str, np.ndarray]]
    times: dict[str, list[np.ndarray]]
    rows: dict[str, list[np.ndarray]]
    hops: dict[str, float]
    widths: dict[str, int]
    scalar: set[str]
    kinds: dict[int, str] = dataclasses.field(default_factory=dict)

    def add(self, frame: Any, values: dict[str, np.ndarray]) -> None:
        start_s = frame.capture_ns / 1e9
        per_frame = {}
        for name, value in values.items():
            hop = _timed_hop_s(frame, name)
            if hop is None:
                per_frame[name] = value
                self.widths[name] = max(self.widths.get(name, 0), value.size)
                if np.ndim(getattr(frame, name)) == 0:
                    self.scalar.add(name)
                continue
            rows = value if value.ndim == 2 else value.reshape(-1, 1)
            first = frame.patch_start_ns / 1e9 if name in PATCH_FIELDS else start_s
            self.hops[name] = hop
            self.widths[name] = max(self.widths.get(name, 0), rows.shape[1] if len(rows) else 0)
            if len(rows):
                self.times.setdefault(name, []).append(first + hop * np.arange(len(rows)))
                self.rows.setdefault(name, []).append(rows)
        self.frames[round(start_s)] = per_frame
        self.kinds[round(start_s)] = str(getattr(frame, "gate", "all (no gate)"))

    def window(self, name: str) -> tuple[float, int]:
        """(seconds before the onset, slots) of a timed field's window around an utterance."""
        hop = self.hops[name]
        if name in PATCH_FIELDS:
            return PATCH_LEAD_S, round(2 * PATCH_LEAD_S / hop)
        return SERIES_LEAD_S, round(SERIES_SPAN_S / hop)


def _vectors(timeline: _Timeline, placements: Sequence[Placement], n: int) -> dict[str, np.ndarray]:
    out = {}
    for name, width in timeline.widths.items():
        columns = width * (timeline.window(name)[1] if name in timeline.hops else FRAMES)
        out[name] = np.zeros((n, columns), dtype=np.float32)
    for placement in placements:
        first = math.floor(placement.onset_s)
        for j in range(FRAMES):
            for name, value in timeline.frames.get(first + j, {}).items():
                width = timeline.widths[name]
                out[name][placement.index, j * width : j * width + value.size] = value
    for name in timeline.rows:
        times = np.concatenate(timeline.times[name])
        rows = np.concatenate(timeline.rows[name])
        order = np.argsort(times, kind="stable")
        times, rows = times[order], rows[order]
        lead_s, slots = timeline.window(name)
        hop, width = timeline.hops[name], timeline.widths[name]
        for placement in placements:
            begin = placement.onset_s - lead_s
            lo, hi = np.searchsorted(times, [begin - 1e-9, begin + slots * hop - 1e-9])
            for t, value in zip(times[lo:hi], rows[lo:hi], strict=True):
                slot = min(slots - 1, max(0, math.floor((t - begin) / hop + 1e-6)))
                out[name][placement.index, slot * width : slot * width + value.size] = value
    return out


def stream_features(
    utterances: Sequence[Utterance], placements: Sequence[Placement],
    conditions: StreamConditions, progress: Progress | None = None,
) -> Features:  # fmt: skip
    """Run the planned stream through the sensor and the wire; each utterance's vector."""
    from sensor.wire import SCHEMA_VERSION

    total_s = stream_seconds(placements)
    started, told = time.monotonic(), 0.0

    def frames() -> Iterator[Any]:
        nonlocal told
        blocks = stream_blocks(utterances, placements, conditions)
        for count, frame in enumerate(wire_frames(blocks, conditions), 1):
            yield frame
            if progress is not None:
                progress(count, total_s)
            if time.monotonic() - told > 30.0:
                told = time.monotonic()
                log.info("sensor and wire: %d of %d s of stream (%.0f s)", count, total_s,
                         told - started)  # fmt: skip

    return features_of_frames(frames(), utterances, placements, int(SCHEMA_VERSION))


def features_of_frames(
    frames: Iterable[Any], utterances: Sequence[Utterance], placements: Sequence[Placement],
    wire_version: int,
) -> Features:  # fmt: skip
    """Each utterance's vector from decoded frames (capture time 0 at the stream's start)."""
    timeline = _Timeline({}, {}, {}, {}, {}, set())
    for frame in frames:
        timeline.add(frame, frame_values(frame))
    named = set().union(*(g for g in GROUPS.values() if g is not None))
    unnamed = sorted(set(timeline.widths) - named - timeline.scalar)
    if unnamed:
        log.info("fields in no named group (counted in 'all' only): %s", ", ".join(unnamed))
    kinds: dict[str, int] = {}
    for placement in placements:
        for j in range(FRAMES):
            kind = timeline.kinds.get(math.floor(placement.onset_s) + j, "missing")
            kinds[kind] = kinds.get(kind, 0) + 1
    return Features(
        fields=_vectors(timeline, placements, len(utterances)),
        scalar=frozenset(timeline.scalar),
        clip_ids=tuple(u.clip_id for u in utterances),
        words=tuple(u.word for u in utterances),
        speakers=tuple(u.speaker for u in utterances),
        sessions=tuple(u.session for u in utterances),
        wire_version=wire_version,
        frame_kinds=dict(sorted(kinds.items())),
    )


# ---- cache ---------------------------------------------------------------------------------


def sensor_digest() -> str:
    """What the frames depend on: the wire's schema version, the sensor's source files and its
    networks' model files (a change to any makes new features)."""
    import sensor
    from sensor.wire import SCHEMA_VERSION

    digest = hashlib.sha256(f"wire v{SCHEMA_VERSION}".encode())
    root = Path(sensor.__file__).resolve().parent
    for path in sorted(root.glob("*.py")) + sorted((root.parent / "models").glob("*.*")):
        if path.suffix in {".py", ".onnx", ".npz"}:
            digest.update(path.name.encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def cache_key(utterances: Sequence[Utterance], conditions: StreamConditions) -> str:
    """The features' identity: conditions, the layout's constants, the utterances (ids and a
    digest of their samples) and :func:`sensor_digest`."""
    digest = hashlib.sha256(json.dumps({
        "conditions": dataclasses.asdict(conditions), "frames": FRAMES, "slots": PATCH_SLOTS,
        "lead": PATCH_LEAD_S, "series": [SERIES_LEAD_S, SERIES_SPAN_S, SERIES_FIELDS],
        "not_sound": sorted(NOT_SOUND), "sensor": sensor_digest(), "layout": 4,
    }, sort_keys=True).encode())  # fmt: skip
    for utterance in utterances:
        digest.update(utterance.clip_id.encode())
        digest.update(hashlib.sha256(np.ascontiguousarray(utterance.samples).tobytes()).digest())
    return digest.hexdigest()[:20]


def save_features(features: Features, path: Path) -> None:
    """Write ``features`` to ``path`` (``.npz``; labels as JSON text, no pickles)."""
    meta = {"scalar": sorted(features.scalar), "clip_ids": features.clip_ids,
            "words": features.words, "speakers": features.speakers,
            "sessions": features.sessions, "wire_version": features.wire_version,
            "frame_kinds": features.frame_kinds}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.npz")
    arrays: dict[str, Any] = {f"f_{name}": value for name, value in features.fields.items()}
    np.savez(partial, __meta__=np.array(json.dumps(meta)), **arrays)
    partial.replace(path)


def load_features(path: Path) -> Features:
    """Features written by :func:`save_features`."""
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["__meta__"]))
            fields = {key[2:]: data[key] for key in data.files if key.startswith("f_")}
    except (OSError, KeyError, ValueError) as error:
        raise FeatureError(f"{path}: not a features cache ({error})") from error
    return Features(fields, frozenset(meta["scalar"]), tuple(meta["clip_ids"]),
                    tuple(meta["words"]), tuple(meta["speakers"]), tuple(meta["sessions"]),
                    int(meta["wire_version"]), dict(meta.get("frame_kinds", {})))  # fmt: skip


def cached_features(
    utterances: Sequence[Utterance], placements: Sequence[Placement],
    conditions: StreamConditions, cache_dir: Path | None, progress: Progress | None = None,
) -> Features:  # fmt: skip
    """:func:`stream_features`, read from ``cache_dir`` when it holds them for the same key."""
    if cache_dir is None:
        return stream_features(utterances, placements, conditions, progress)
    path = cache_dir / f"features-{cache_key(utterances, conditions)}.npz"
    if path.is_file():
        log.info("features of %d utterances from %s", len(utterances), path)
        return load_features(path)
    features = stream_features(utterances, placements, conditions, progress)
    save_features(features, path)
    log.info("features of %d utterances kept in %s", len(utterances), path)
    return features
