"""Held-out validation of a model with the deployed streaming scorer and event tracker: clip
and step AUPRC, event counts by SNR, false alarms in a long non-dog soundscape, a threshold
sweep, and the held-out clips scored as recorded (:func:`validate`; docs/MODEL_HISTORY.md,
"Validation", defines each metric).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.config import DetectorSettings
from analyzer.detect import DogClassifier, DogModel, EventTracker
from analyzer.offline import average_precision, event_counts, recall_at_far
from training.corpus import RATE, is_validation_group, load_audio, read_manifests
from training.trainset import mel_of_audio, scaled_to_dbfs

HOP_S = 0.02
Models = DogModel | tuple[DogModel, ...]  # one model, or several scored as an ensemble
SNR_BINS = [(-5.0, 0.0), (0.0, 10.0), (10.0, 20.01), (float("inf"), float("inf"))]


def stream_scores(model: Models, mel: np.ndarray, settings: DetectorSettings) -> np.ndarray:
    """Scores of every step of a stream, computed as the live pipeline does (1 s at a time).
    Several models score as an ensemble: the mean of their scores."""
    if isinstance(model, tuple):
        return np.mean([stream_scores(one, mel, settings) for one in model], axis=0)
    scorer = DogClassifier(model, max(1, round(settings.smoothing_s / HOP_S)),
                           settings.min_band_level_db)  # fmt: skip
    parts = [scorer.scores(mel[i : i + 50].astype(np.float32)) for i in range(0, len(mel), 50)]
    parts.append(scorer.flush())
    return np.concatenate(parts)


def spans_of_scores(scores: np.ndarray, settings: DetectorSettings) -> list[tuple[float, float]]:
    tracker = EventTracker("val", settings, "val")
    zeros = np.zeros(scores.size)
    events = tracker.feed(0, HOP_S, scores, zeros, zeros) + tracker.flush()
    return [(e.onset_ns / 1e9, e.offset_ns / 1e9) for e in events]


def runs(mask: np.ndarray, merge_gap_s: float = 0.0) -> list[tuple[float, float]]:
    """Spans (s) of consecutive true steps, runs closer than ``merge_gap_s`` joined."""
    padded = np.r_[False, mask, False].astype(int)
    starts = np.flatnonzero(np.diff(padded) == 1)
    ends = np.flatnonzero(np.diff(padded) == -1)
    spans: list[tuple[float, float]] = []
    for s, e in zip(starts * HOP_S, ends * HOP_S, strict=True):
        if spans and s - spans[-1][1] < merge_gap_s:
            spans[-1] = (spans[-1][0], float(e))
        else:
            spans.append((float(s), float(e)))
    return spans


def _overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and a[1] > b[0]


def recorded_clip_scores(
    model: Models, corpora: list[Path], settings: DetectorSettings, seed: int,
    fraction: float, silences_s: tuple[float, ...] = (0.0,),
) -> tuple[np.ndarray, list[np.ndarray]]:  # fmt: skip
    """Highest score of every held-out clip exactly as recorded (no mixing, no lead-in; the
    clip scaled to -30 dBFS RMS), as ``barkwatch analyze`` would see the file, once per entry
    of ``silences_s`` (seconds of digital zeros before and after it, as clip datasets pad short
    clips); and its label. Each clip is read once."""
    labels: list[bool] = []
    scores: list[list[float]] = [[] for _ in silences_s]
    paddings = [np.zeros(round(s * RATE)) for s in silences_s]
    for clip in read_manifests(corpora[0], corpora[1:]):
        if not is_validation_group(clip.group, seed, fraction):
            continue
        audio = scaled_to_dbfs(load_audio(clip.path), -30.0)
        labels.append(clip.is_dog)
        for zeros, per_padding in zip(paddings, scores, strict=True):
            mel = mel_of_audio(np.concatenate([zeros, audio, zeros]))
            per_padding.append(float(stream_scores(model, mel, settings).max(initial=0.0)))
    return np.array(labels), [np.array(s) for s in scores]


def _event_counts_by_bin(
    streams: list[tuple[np.ndarray, np.ndarray, float]], settings: DetectorSettings
) -> dict[tuple[float, float], list[int]]:
    per_bin = {b: [0, 0, 0] for b in SNR_BINS}
    for lab, scores, snr in streams:
        reference = runs(lab == 1, settings.merge_gap_s)
        # An estimate over only "unknown" steps (the dog clip's quieter parts) is not judged.
        unknown = runs(lab == -1)
        estimated = [
            e for e in spans_of_scores(scores, settings)
            if any(_overlaps(e, r) for r in reference) or not any(_overlaps(e, r) for r in unknown)
        ]  # fmt: skip
        counts = event_counts(reference, estimated, 0.25)
        for lo, hi in SNR_BINS:
            if (lo <= snr < hi) or (snr == lo == float("inf")):
                per_bin[(lo, hi)][0] += counts.tp
                per_bin[(lo, hi)][1] += counts.fp
                per_bin[(lo, hi)][2] += counts.fn
    return per_bin


def _prf(tp: int, fp: int, fn: int) -> dict[str, float | int]:
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    return {
        "precision": round(p, 4),
        "recall": round(r, 4),
        "f1": round(2 * p * r / (p + r), 4) if p + r else 0.0,
        "reference_events": tp + fn,
    }


def validate(
    model: Models, mel: np.ndarray, labels: np.ndarray, offsets: np.ndarray,
    meta: list[dict[str, Any]], settings: DetectorSettings, seed: int, corpora: list[Path],
    val_fraction: float,
) -> dict[str, Any]:  # fmt: skip
    """Held-out metrics with the deployed scorer and tracker (see the card for definitions)."""
    val = [i for i, m in enumerate(meta) if m["split"] == "val"]
    clip_labels, clip_scores = [], []
    step_labels, step_scores = [], []
    dog_streams: list[tuple[np.ndarray, np.ndarray, float]] = []
    negatives: list[int] = []
    for i in val:
        m, lab = meta[i], labels[offsets[i] : offsets[i + 1]]
        scores = stream_scores(model, mel[offsets[i] : offsets[i + 1]], settings)
        keep = lab >= 0
        step_labels.append(lab[keep] == 1)
        step_scores.append(scores[keep])
        clip_labels.append(bool(m["is_dog"]))
        clip_scores.append(float(scores.max(initial=0.0)))
        if not m["is_dog"]:
            negatives.append(i)
        elif (lab == 1).any():
            dog_streams.append((lab, scores, float(m["snr_db"])))
    y = np.array(clip_labels)
    s = np.array(clip_scores)
    recall2, threshold2 = recall_at_far(y, s, 0.02)
    # A long non-dog soundscape: every held-out non-dog stream, in a seeded order, back to back.
    order = np.random.default_rng(seed).permutation(negatives)
    soundscape = np.concatenate([mel[offsets[i] : offsets[i + 1]] for i in order])
    fa_scores = stream_scores(model, soundscape, settings)
    hours = soundscape.shape[0] * HOP_S / 3600
    sweep = {}
    for on in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98):
        swept = dataclasses.replace(settings, on_threshold=on, off_threshold=on - 0.2)
        per_bin = _event_counts_by_bin(dog_streams, swept)
        at_least_0db = np.sum([per_bin[b] for b in SNR_BINS[1:]], axis=0)
        sweep[f"on {on:.2f} / off {on - 0.2:.2f}"] = {
            "false_alarms_per_hour": round(len(spans_of_scores(fa_scores, swept)) / hours, 2),
            "event_f1_snr_at_least_0db": _prf(*map(int, at_least_0db))["f1"],
            "event_f1_snr_-5_to_0db": _prf(*per_bin[SNR_BINS[0]])["f1"],
        }
    per_bin = _event_counts_by_bin(dog_streams, settings)
    event_f1 = {}
    for (lo, hi), counts in per_bin.items():
        name = "clean (no background)" if lo == float("inf") else f"SNR {lo:+.0f}..{hi:+.0f} dB"
        event_f1[name] = _prf(*counts)
    false_alarms = len(spans_of_scores(fa_scores, settings))
    recorded_y, (recorded_s, padded_s) = recorded_clip_scores(
        model, corpora, settings, seed, val_fraction, (0.0, 1.0))  # fmt: skip
    recorded_recall2, _ = recall_at_far(recorded_y, recorded_s, 0.02)
    padded_recall2, _ = recall_at_far(recorded_y, padded_s, 0.02)
    return {
        "validation_streams": len(val),
        "validation_dog_streams": int(y.sum()),
        "validation_groups": len({meta[i]["group"] for i in val if meta[i]["kind"] == "clip"}),
        "clip_auprc": round(average_precision(y, s), 4),
        "clip_recall_at_2pct_far": round(recall2, 4),
        "clip_threshold_at_2pct_far": round(threshold2, 4),
        "recorded_clips": int(recorded_y.size),
        "recorded_dog_clips": int(recorded_y.sum()),
        "recorded_clip_auprc": round(average_precision(recorded_y, recorded_s), 4),
        "recorded_clip_recall_at_2pct_far": round(recorded_recall2, 4),
        "silence_padded_clip_auprc": round(average_precision(recorded_y, padded_s), 4),
        "silence_padded_clip_recall_at_2pct_far": round(padded_recall2, 4),
        "step_auprc": round(
            average_precision(np.concatenate(step_labels), np.concatenate(step_scores)), 4
        ),  # fmt: skip
        "step_dog_fraction": round(float(np.mean(np.concatenate(step_labels))), 4),
        "event_based_onset_collar_0.25s": event_f1,
        "non_dog_soundscape_hours": round(hours, 3),
        "non_dog_soundscape_false_alarms": false_alarms,
        "false_alarms_per_hour": round(false_alarms / hours, 2),
        "threshold_sweep": sweep,
    }
