"""Storage in InfluxDB: points, the v1 HTTP client, and evidence read back."""

from __future__ import annotations

from analyzer.store.evidence_store import (
    RecomputeReport,
    StoredWindow,
    load_chain_head,
    load_coverage,
    load_events,
    load_windows,
    recompute,
)
from analyzer.store.influx import (
    InfluxClient,
    InfluxSettings,
    RefusedPoints,
    background_point,
    event_point,
    health_point,
    level_line,
    level_point,
    stats_point,
    status_point,
    write_with_retry,
)
from analyzer.store.points import progress_point, window_point

__all__ = [
    "InfluxClient",
    "InfluxSettings",
    "RecomputeReport",
    "RefusedPoints",
    "StoredWindow",
    "background_point",
    "event_point",
    "health_point",
    "level_line",
    "level_point",
    "load_chain_head",
    "load_coverage",
    "load_events",
    "load_windows",
    "progress_point",
    "recompute",
    "stats_point",
    "status_point",
    "window_point",
    "write_with_retry",
]
