"""The pipeline on sound files, in-process: offline analysis and evaluation."""

from __future__ import annotations

from analyzer.offline.analysis import FileAnalysis, Progress, analyze
from analyzer.offline.evaluate import (
    average_precision,
    event_counts,
    matched_references,
    read_annotations,
    recall_at_far,
    run_evaluate,
)

__all__ = [
    "FileAnalysis",
    "Progress",
    "analyze",
    "average_precision",
    "event_counts",
    "matched_references",
    "read_annotations",
    "recall_at_far",
    "run_evaluate",
]
