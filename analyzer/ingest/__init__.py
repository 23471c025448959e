"""Taking frames in: the MQTT service, plausibility, ordering, per-device live analysis."""

from __future__ import annotations

from analyzer.ingest.service import Analyzer

__all__ = ["Analyzer"]
