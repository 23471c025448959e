"""Train the dog-vocalization classifier, validate it on held-out recordings, write its card.

    python scripts/train_classifier.py --corpus /work/shared/corpus/train \\
        [--trainset /tmp/trainset.npz] [--out models/dog_classifier.npz] [--seed 1] [--compare]

One seeded command: builds the training set with scripts/make_training_set.py when
``--trainset`` does not exist yet (a few minutes on 2 cores), computes the classifier's
features with ``analyzer.classifier`` (the code the analyzer runs), trains a small
multilayer perceptron with scikit-learn (training only; inference is numpy), exports its
weights to a plain ``.npz``, validates on the held-out groups with the streaming scorer and
the event tracker exactly as deployed, and writes ``models/MODEL_CARD.md`` and
``models/dog_classifier.metrics.json``. ``--compare`` also fits logistic regression and
gradient boosting on the same data and reports them (the card's model-choice table).
"""

from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import hashlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import make_training_set  # noqa: E402

from analyzer.classifier import (  # noqa: E402
    N_FEATURES,
    DogClassifier,
    DogModel,
    features_of_stream,
)
from analyzer.config import DetectorSettings  # noqa: E402
from analyzer.evaluate import average_precision, event_counts  # noqa: E402
from analyzer.events import EventTracker  # noqa: E402

log = logging.getLogger("train_classifier")

HOP_S = 0.02
HIDDEN = (64, 32)
NEGATIVE_STRIDE = 2  # keep every 2nd negative training step (they are plentiful and alike)
SNR_BINS = [(-5.0, 0.0), (0.0, 10.0), (10.0, 20.01), (float("inf"), float("inf"))]


def load_trainset(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]],
                                       dict[str, Any]]:  # fmt: skip
    with np.load(path, allow_pickle=False) as data:
        return (data["mel"], data["labels"], data["offsets"], json.loads(str(data["meta_json"])),
                json.loads(str(data["config_json"])))  # fmt: skip


def stream_scores(model: DogModel, mel: np.ndarray, settings: DetectorSettings) -> np.ndarray:
    """Scores of every step of a stream, computed as the live pipeline does (1 s at a time)."""
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


def recall_at_far(labels: np.ndarray, scores: np.ndarray, far: float) -> tuple[float, float]:
    """Recall of positives at the threshold where ``far`` of negatives score above it."""
    negatives = np.sort(scores[~labels])
    threshold = float(np.quantile(negatives, 1.0 - far)) if negatives.size else 0.5
    return float(np.mean(scores[labels] > threshold)), threshold


def fit_mlp(x: np.ndarray, y: np.ndarray, weight: np.ndarray, seed: int, epochs: int) -> Any:
    from sklearn.neural_network import MLPClassifier

    mlp = MLPClassifier(hidden_layer_sizes=HIDDEN, alpha=1e-2, batch_size=512,
                        learning_rate_init=1e-3, max_iter=epochs, random_state=seed,
                        shuffle=True, tol=1e-5, n_iter_no_change=epochs, verbose=False)  # fmt: skip
    try:
        mlp.fit(x, y, sample_weight=weight)
    except TypeError:  # scikit-learn before 1.7: no sample weights for MLPs
        mlp.fit(x, y)
    return mlp


def export(mlp: Any, mean: np.ndarray, scale: np.ndarray, metadata: dict[str, Any]) -> DogModel:
    weights = tuple(np.asarray(w, dtype=np.float32) for w in mlp.coefs_)
    biases = tuple(np.asarray(b, dtype=np.float32) for b in mlp.intercepts_)
    digest = hashlib.sha256(b"".join(w.tobytes() for w in weights + biases)).hexdigest()[:8]
    version = f"dog-mlp-1.0-{digest}"
    return DogModel(version, mean.astype(np.float32), scale.astype(np.float32), weights, biases,
                    {**metadata, "version": version})  # fmt: skip


def licence_counts(corpus: Path) -> dict[str, int]:
    """Clips per licence family (the text before the first parenthesis)."""
    counts: collections.Counter[str] = collections.Counter()
    with open(corpus / "manifest.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if "snoring" in row.get("original_class", ""):
                continue
            counts[row["licence"].split(" (")[0].strip() or "unknown"] += 1
    return dict(counts.most_common())


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
    return {"precision": round(p, 4), "recall": round(r, 4),
            "f1": round(2 * p * r / (p + r), 4) if p + r else 0.0, "reference_events": tp + fn}


def validate(
    model: DogModel, mel: np.ndarray, labels: np.ndarray, offsets: np.ndarray,
    meta: list[dict[str, Any]], settings: DetectorSettings, seed: int,
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
    return {
        "validation_streams": len(val),
        "validation_dog_streams": int(y.sum()),
        "validation_groups": len({meta[i]["group"] for i in val if meta[i]["kind"] == "clip"}),
        "clip_auprc": round(average_precision(y, s), 4),
        "clip_recall_at_2pct_far": round(recall2, 4),
        "clip_threshold_at_2pct_far": round(threshold2, 4),
        "step_auprc": round(average_precision(np.concatenate(step_labels),
                                              np.concatenate(step_scores)), 4),  # fmt: skip
        "step_dog_fraction": round(float(np.mean(np.concatenate(step_labels))), 4),
        "event_based_onset_collar_0.25s": event_f1,
        "non_dog_soundscape_hours": round(hours, 3),
        "non_dog_soundscape_false_alarms": false_alarms,
        "false_alarms_per_hour": round(false_alarms / hours, 2),
        "threshold_sweep": sweep,
    }


def compare_models(
    x: np.ndarray, y: np.ndarray, xv: np.ndarray, yv: np.ndarray, seed: int
) -> dict[str, Any]:
    """Logistic regression and gradient boosting on the same features (step AUPRC, speed)."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(seed)
    sub = rng.choice(x.shape[0], min(200_000, x.shape[0]), replace=False)
    out: dict[str, Any] = {}
    for name, model in (
        ("logistic regression", LogisticRegression(C=1.0, max_iter=300)),
        ("gradient boosting (200 trees, 31 leaves)",
         HistGradientBoostingClassifier(max_iter=200, random_state=seed)),
    ):  # fmt: skip
        started = time.perf_counter()
        model.fit(x[sub], y[sub])
        fit_s = time.perf_counter() - started
        started = time.perf_counter()
        p = model.predict_proba(xv)[:, 1]
        us_per_step = (time.perf_counter() - started) / xv.shape[0] * 1e6
        out[name] = {"step_auprc": round(average_precision(yv, p), 4),
                     "fit_s_on_200k_steps": round(fit_s, 1),
                     "predict_us_per_step": round(us_per_step, 3)}  # fmt: skip
        log.info("%s: %s", name, out[name])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="folder with manifest.csv")
    parser.add_argument("--trainset", type=Path, default=Path("/tmp/barkwatch-trainset.npz"),
                        help="training set (built here if missing)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "models" / "dog_classifier.npz")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--compare", action="store_true", help="also fit LR and GBDT")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("sensor.frames").setLevel(logging.ERROR)
    started = time.monotonic()
    if not args.trainset.exists():
        make_training_set.build(args.corpus, args.trainset, seed=args.seed, jobs=args.jobs)
    mel, labels, offsets, meta, config = load_trainset(args.trainset)
    log.info("%d streams, %.2f h", len(meta), mel.shape[0] * HOP_S / 3600)
    features = np.empty((mel.shape[0], N_FEATURES), dtype=np.float32)
    for i in range(len(meta)):
        features[offsets[i] : offsets[i + 1]] = features_of_stream(
            mel[offsets[i] : offsets[i + 1]].astype(np.float32))  # fmt: skip
    log.info("features done at %.0f s", time.monotonic() - started)
    split = np.repeat(np.array([m["split"] for m in meta]), np.diff(offsets))
    rng = np.random.default_rng(args.seed)
    train = (split == "train") & (labels >= 0)
    train &= (labels == 1) | (rng.random(labels.size) < 1.0 / NEGATIVE_STRIDE)
    x, y = features[train], labels[train] == 1
    mean = x.mean(axis=0)
    scale = 1.0 / np.maximum(x.std(axis=0), 1e-3)
    xs = (x - mean) * scale
    # Balance the classes: the dog steps weigh as much, in total, as the others.
    weight = np.where(y, 0.5 / y.mean(), 0.5 / (1.0 - y.mean()))
    log.info("training on %d steps (%.1f %% dog)", y.size, 100 * y.mean())
    fit_started = time.monotonic()
    mlp = fit_mlp(xs, y, weight, args.seed, args.epochs)
    fit_s = time.monotonic() - fit_started
    log.info("MLP fitted in %.0f s", fit_s)
    settings = DetectorSettings()
    metadata = {
        "trained_on": str(args.corpus), "trainset_config": config, "hidden_layers": list(HIDDEN),
        "epochs": args.epochs, "seed": args.seed, "training_steps": int(y.size),
        "feature_count": N_FEATURES,
    }  # fmt: skip
    model = export(mlp, mean, scale, metadata)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save(args.out)
    log.info("wrote %s (%s, %d bytes)", args.out, model.version, args.out.stat().st_size)
    metrics = validate(model, mel, labels, offsets, meta, settings, args.seed)
    valid = (split == "val") & (labels >= 0)
    if args.compare:
        mlp_p = model.probabilities(features[valid])
        metrics["model_comparison"] = {
            "MLP 64-32 (chosen)": {"step_auprc_unsmoothed": round(
                average_precision(labels[valid] == 1, mlp_p), 4), "fit_s": round(fit_s, 1)},
            **compare_models(xs, y, (features[valid] - mean) * scale, labels[valid] == 1,
                             args.seed),
        }  # fmt: skip
    metrics.update({"model_version": model.version, "licences": licence_counts(args.corpus),
                    "training_hours": round(float(np.sum(split == "train")) * HOP_S / 3600, 2),
                    "train_seconds_total": round(time.monotonic() - started),
                    "settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__},
                    })  # fmt: skip
    metrics_path = args.out.with_suffix(".metrics.json")
    metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
    log.info("metrics: %s", json.dumps(metrics, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
