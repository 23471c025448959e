"""``barkwatch evaluate DIR``: detection accuracy against annotated recordings.

Every audio file in DIR (``.wav``, ``.flac``, ``.ogg``, ``.mp3``, ``.m4a``; not recursive) is
analysed exactly as ``barkwatch analyze`` does. Its reference is ``NAME.annotations.csv`` or
``NAME.csv`` beside it (``onset_s,offset_s,label``, as ``demo/example.annotations.csv``);
every row is a dog vocalization unless its label is ``not_dog`` or ``other``; a file without
one holds no dog. Metric definitions (implemented here, after the DCASE / sed_eval ones):

* Segment-based (``segment_s``, default 1 s): the file is cut into consecutive segments from
  0; a segment is active in the reference (or the estimate) when any reference (estimated)
  event overlaps it. TP = active in both, FP = estimated only, FN = reference only, summed
  over all files; precision = TP/(TP+FP), recall = TP/(TP+FN), F1 their harmonic mean.
* Event-based (onset collar ``collar_s``, default 0.25 s; offsets not judged): an estimated
  event matches a reference event when their onsets differ by at most the collar; each event
  matches at most once (pairs taken in order of onset distance, nearest first). TP =
  matched pairs, FP = unmatched estimated events, FN = unmatched reference events.
* False alarms per hour: estimated events that overlap no reference event, per hour of
  non-dog audio (file duration minus the union of reference events); also given separately
  for the files without annotations.
* Precision-recall curve: segment-based, from every segment's maximum step score swept over
  all thresholds (the event tracker is not applied); average precision as the area.
* Clip-based: each file is one clip, a dog clip when it has reference events, scored by its
  highest step score (``max_dog_score`` of ``barkwatch analyze``); average precision over
  files, and the recall of dog clips at the threshold that 2 % of the other clips exceed.

``sed_eval`` was not used: it pulls in ``dcase_util`` and its many dependencies for three
counts that fit on a page.
"""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.detect import DetectorSettings, DevicePipeline
from analyzer.errors import AnalyzerError
from analyzer.offline.analysis import Progress
from sensor.calibration import DEFAULT_FULL_SCALE_DB

log = logging.getLogger(__name__)

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3", ".m4a")
NOT_DOG_LABELS = {"not_dog", "other", "non_dog"}

Span = tuple[float, float]


class EvaluationError(AnalyzerError):
    """The evaluation folder or an annotation file is unusable."""


@dataclass
class Counts:
    """True positives, false positives, false negatives."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, other: Counts) -> None:
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn

    def summary(self) -> dict[str, float | int]:
        precision = self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0
        recall = self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "precision": round(precision, 4),
                "recall": round(recall, 4), "f1": round(f1, 4)}  # fmt: skip


def read_annotations(path: Path) -> list[Span]:
    """Dog spans (onset_s, offset_s) of an annotation CSV, sorted by onset."""
    spans = []
    try:
        with open(path, newline="") as handle:
            for line, row in enumerate(csv.DictReader(handle), start=2):
                try:
                    onset, offset = float(row["onset_s"]), float(row["offset_s"])
                except (KeyError, TypeError, ValueError) as exc:
                    raise EvaluationError(f"{path}:{line}: need numeric onset_s,offset_s") from exc
                if offset < onset:
                    raise EvaluationError(f"{path}:{line}: offset_s before onset_s")
                if (row.get("label") or "dog").strip().lower() not in NOT_DOG_LABELS:
                    spans.append((onset, offset))
    except OSError as exc:
        raise EvaluationError(f"cannot read {path}: {exc}") from exc
    return sorted(spans)


def write_annotations(path: Path, spans: list[Span]) -> None:
    """Write dog spans as an annotation CSV (``onset_s,offset_s,label``, seconds, 3 decimals)."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["onset_s", "offset_s", "label"])
        for onset, offset in sorted(spans):
            writer.writerow([f"{onset:.3f}", f"{offset:.3f}", "dog"])


def segment_activity(spans: list[Span], duration_s: float, segment_s: float) -> np.ndarray:
    """Whether each segment [k*segment_s, (k+1)*segment_s) overlaps any span."""
    n = max(1, int(np.ceil(duration_s / segment_s - 1e-9)))
    active = np.zeros(n, dtype=bool)
    for onset, offset in spans:
        first = int(np.floor(onset / segment_s))
        last = int(np.ceil(offset / segment_s)) - 1 if offset > onset else first
        active[max(0, first) : min(n, last + 1)] = True
    return active


def segment_counts(
    reference: list[Span], estimated: list[Span], duration_s: float, segment_s: float = 1.0
) -> Counts:
    """Segment-based counts of one file."""
    ref = segment_activity(reference, duration_s, segment_s)
    est = segment_activity(estimated, duration_s, segment_s)
    return Counts(int(np.sum(ref & est)), int(np.sum(est & ~ref)), int(np.sum(ref & ~est)))


def event_counts(reference: list[Span], estimated: list[Span], collar_s: float = 0.25) -> Counts:
    """Event-based counts of one file (onset collar only), nearest onsets matched first."""
    tp = len(matched_references(reference, estimated, collar_s))
    return Counts(tp, len(estimated) - tp, len(reference) - tp)


def matched_references(reference: list[Span], estimated: list[Span], collar_s: float = 0.25
                       ) -> set[int]:  # fmt: skip
    """Indices of the reference events that an estimated event's onset matches within
    ``collar_s``: each event matched at most once, the nearest onsets first."""
    pairs = sorted(
        (abs(e[0] - r[0]), i, j)
        for i, r in enumerate(reference)
        for j, e in enumerate(estimated)
        if abs(e[0] - r[0]) <= collar_s + 1e-9
    )
    used_ref: set[int] = set()
    used_est: set[int] = set()
    for _, i, j in pairs:
        if i not in used_ref and j not in used_est:
            used_ref.add(i)
            used_est.add(j)
    return used_ref


def false_alarms(reference: list[Span], estimated: list[Span]) -> int:
    """Estimated events that overlap no reference event."""
    return sum(1 for e in estimated if not any(e[0] < r[1] and e[1] > r[0] for r in reference))


def union_length_s(spans: list[Span], duration_s: float) -> float:
    """Length of the union of spans, clipped to [0, duration_s]."""
    total, end = 0.0, 0.0
    for onset, offset in sorted(spans):
        onset, offset = max(onset, end, 0.0), min(offset, duration_s)
        if offset > onset:
            total += offset - onset
            end = offset
    return total


def average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the precision-recall curve (step-wise, as scikit-learn's definition)."""
    precision, recall, _ = pr_curve(labels, scores)
    return float(np.sum(np.diff(recall) * precision[1:]))


def pr_curve(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Precision and recall (from recall 0 upward) at every distinct score threshold."""
    labels = np.asarray(labels, dtype=bool)
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    s, y = np.asarray(scores)[order], labels[order]
    distinct = np.r_[np.flatnonzero(np.diff(s)), y.size - 1] if y.size else np.zeros(0, int)
    tp = np.cumsum(y)[distinct]
    fp = (distinct + 1) - tp
    positives = max(1, int(labels.sum()))
    precision = np.r_[1.0, tp / np.maximum(tp + fp, 1)]
    recall = np.r_[0.0, tp / positives]
    return precision, recall, np.r_[np.inf, s[distinct]] if y.size else np.array([np.inf])


def recall_at_far(labels: np.ndarray, scores: np.ndarray, far: float) -> tuple[float, float]:
    """Recall of positives at the threshold where ``far`` of negatives score above it."""
    labels = np.asarray(labels, dtype=bool)
    negatives = np.sort(scores[~labels])
    threshold = float(np.quantile(negatives, 1.0 - far)) if negatives.size else 0.5
    return float(np.mean(scores[labels] > threshold)), threshold


@dataclass
class FileResult:
    """What one evaluated file contributed."""

    file: str
    duration_s: float
    reference: list[Span]
    estimated: list[Span]
    segment_scores: np.ndarray = field(repr=False)


def segment_max_scores(
    starts_ns: list[int], scores: list[np.ndarray], hop_s: float, duration_s: float,
    segment_s: float,
) -> np.ndarray:  # fmt: skip
    """Maximum step score within each segment of a file."""
    n = max(1, int(np.ceil(duration_s / segment_s - 1e-9)))
    out = np.zeros(n)
    for start_ns, part in zip(starts_ns, scores, strict=True):
        if part.size == 0:
            continue
        times = start_ns / 1e9 + hop_s * np.arange(part.size)
        index = np.minimum((times / segment_s).astype(int), n - 1)
        np.maximum.at(out, index, part)
    return out


def evaluate_file(
    path: Path, reference: list[Span], settings: DetectorSettings, full_scale_db: float,
    segment_s: float, progress: Progress | None = None,
) -> FileResult:  # fmt: skip
    """Run the offline pipeline on one file and collect its events and segment scores;
    ``progress`` is told (seconds measured, the file's length) after every frame."""
    from analyzer.offline.analysis import measured_frames
    from sensor.capture import FileSource

    source = FileSource(path, block_s=1.0)
    pipeline = DevicePipeline("evaluate", settings)
    events = []
    starts: list[int] = []
    parts: list[np.ndarray] = []
    hop_s = 0.02
    for count, frame in enumerate(measured_frames(source, full_scale_db, settings.model_path)):
        if count == 0:
            hop_s = frame.hop_s
        if progress is not None:
            progress(min(frame.end_ns / 1e9, source.duration_s), source.duration_s)
        result = pipeline.feed(frame)
        events.extend(result.events)
        starts.append(result.scores_start_ns)
        parts.append(result.step_scores)
    final = pipeline.finish()  # the held-back last steps and the events still open
    events.extend(final.events)
    starts.append(final.scores_start_ns)
    parts.append(final.step_scores)
    duration_s = float(source.duration_s)
    return FileResult(
        file=str(path),
        duration_s=duration_s,
        reference=reference,
        estimated=[(e.onset_ns / 1e9, e.offset_ns / 1e9) for e in events],
        segment_scores=segment_max_scores(starts, parts, hop_s, duration_s, segment_s),
    )


def find_annotations(audio: Path) -> Path | None:
    """``NAME.annotations.csv`` or ``NAME.csv`` beside the audio file, if any."""
    for candidate in (audio.with_suffix(".annotations.csv"), audio.with_suffix(".csv")):
        if candidate.is_file():
            return candidate
    return None


def summarise(
    results: list[FileResult], segment_s: float, collar_s: float
) -> tuple[dict[str, Any], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The JSON summary and the segment-based PR curve of a set of file results."""
    segments, events = Counts(), Counts()
    fa_all, fa_unannotated = 0, 0
    non_dog_s, unannotated_s = 0.0, 0.0
    labels, scores = [], []
    files = []
    clip_s = np.array([float(r.segment_scores.max(initial=0.0)) for r in results])
    for r, clip_score in zip(results, clip_s, strict=True):
        seg = segment_counts(r.reference, r.estimated, r.duration_s, segment_s)
        ev = event_counts(r.reference, r.estimated, collar_s)
        segments.add(seg)
        events.add(ev)
        fa = false_alarms(r.reference, r.estimated)
        fa_all += fa
        non_dog_s += r.duration_s - union_length_s(r.reference, r.duration_s)
        if not r.reference:
            fa_unannotated += fa
            unannotated_s += r.duration_s
        labels.append(segment_activity(r.reference, r.duration_s, segment_s))
        scores.append(r.segment_scores[: labels[-1].size])
        files.append({
            "file": r.file, "duration_s": round(r.duration_s, 3),
            "reference_events": len(r.reference), "estimated_events": len(r.estimated),
            "false_alarms": fa, "segment": seg.summary(), "event": ev.summary(),
            "max_dog_score": round(float(clip_score), 4),
        })  # fmt: skip
    y = np.concatenate(labels) if labels else np.zeros(0, bool)
    s = np.concatenate(scores) if scores else np.zeros(0)
    curve = pr_curve(y, s)
    clip_y = np.array([bool(r.reference) for r in results])
    clip_recall, clip_threshold = recall_at_far(clip_y, clip_s, 0.02)
    both = clip_y.any() and not clip_y.all()
    summary: dict[str, Any] = {
        "files": len(results),
        "duration_s": round(sum(r.duration_s for r in results), 3),
        "segment_s": segment_s,
        "collar_s": collar_s,
        "segment_based": segments.summary(),
        "event_based": events.summary(),
        "false_alarms": fa_all,
        "non_dog_hours": round(non_dog_s / 3600, 5),
        "false_alarms_per_hour": round(fa_all / (non_dog_s / 3600), 3) if non_dog_s else None,
        "unannotated_false_alarms": fa_unannotated,
        "unannotated_hours": round(unannotated_s / 3600, 5),
        "unannotated_false_alarms_per_hour": (
            round(fa_unannotated / (unannotated_s / 3600), 3) if unannotated_s else None
        ),
        "segment_average_precision": (
            round(average_precision(y, s), 4) if y.any() else None
        ),
        "clip_based": {
            "clips": len(results), "dog_clips": int(clip_y.sum()),
            "average_precision": round(average_precision(clip_y, clip_s), 4) if both else None,
            "recall_at_2pct_false_alarm_rate": round(clip_recall, 4) if both else None,
            "threshold_at_2pct_false_alarm_rate": round(clip_threshold, 4) if both else None,
        },
        "per_file": files,
    }
    return summary, curve


def plot_pr_curve(curve: tuple[np.ndarray, np.ndarray, np.ndarray], path: Path,
                  title: str) -> None:  # fmt: skip
    """Write the precision-recall curve as a PNG (matplotlib, Agg backend)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise EvaluationError(
            "the PR curve needs matplotlib: pip install 'barkwatch[evaluate]'"
        ) from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    precision, recall, _ = curve
    fig, ax = plt.subplots(figsize=(5, 4), dpi=100)
    ax.step(recall, precision, where="post")
    ax.set_xlabel("recall (1 s segments)")
    ax.set_ylabel("precision")
    ax.set_xlim(0, 1.01)
    ax.set_ylim(0, 1.01)
    ax.grid(True, alpha=0.3)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _share_of_files(progress: Progress, done: int, files: int) -> Progress:
    """One file's (seconds measured, length) told as (files done and this one's share, files)."""

    def told(measured_s: float, length_s: float) -> None:
        progress(done + (measured_s / length_s if length_s else 1.0), files)

    return told


def evaluate_dir(
    directory: Path, out_dir: Path | None = None, settings: DetectorSettings | None = None,
    full_scale_db: float = DEFAULT_FULL_SCALE_DB, segment_s: float = 1.0,
    collar_s: float = 0.25, progress: Progress | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Evaluate every audio file in ``directory``; write summary.json and pr_curve.png.
    ``progress`` is told (files done, with the current one's measured fraction, files)."""
    settings = settings or DetectorSettings()
    if not directory.is_dir():
        raise EvaluationError(f"{directory} is not a folder")
    audio = sorted(p for p in directory.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES)
    if not audio:
        raise EvaluationError(f"{directory} holds no audio files ({', '.join(AUDIO_SUFFIXES)})")
    results = []
    for index, path in enumerate(audio):
        annotations = find_annotations(path)
        reference = read_annotations(annotations) if annotations else []
        log.info("evaluating %s (%d reference events)", path.name, len(reference))
        told = None if progress is None else _share_of_files(progress, index, len(audio))
        results.append(evaluate_file(path, reference, settings, full_scale_db, segment_s,
                                     told))  # fmt: skip
    summary, curve = summarise(results, segment_s, collar_s)
    from analyzer.detect import model_version

    summary = {"model_version": model_version(settings), "full_scale_db": full_scale_db,
               **summary}  # fmt: skip
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        ap = summary["segment_average_precision"]
        title = f"{directory.name}: {summary['model_version']}" + (
            f", AP {ap:.3f}" if ap is not None else ""
        )
        plot_pr_curve(curve, out_dir / "pr_curve.png", title)
        summary["outputs"] = [str(out_dir / "summary.json"), str(out_dir / "pr_curve.png")]
    return summary


def run_evaluate(directory: str, out_dir: str, full_scale_db: float,
                 config: str | None = None, progress: Progress | None = None,
                 ) -> dict[str, Any]:  # fmt: skip
    """``barkwatch evaluate``: the summary to print (without ``per_file``); the files go to
    ``out_dir``."""
    settings = DetectorSettings()
    if config:
        from analyzer.config import load_analyzer_config

        settings = load_analyzer_config(config).detector
    summary = evaluate_dir(Path(directory), Path(out_dir), settings, full_scale_db,
                           progress=progress)
    return {k: v for k, v in summary.items() if k != "per_file"}
