"""What the report shows, read now: the case (links verified on this read) and, for each
linked window, the stored events, per-second levels and calibration dates around it."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from analyzer import __version__
from analyzer.cases import CaseStore, CaseView, LinkCheck, read_case
from analyzer.cases.verdicts import EventReview, review_links
from analyzer.errors import AnalyzerError
from analyzer.ordinance import RuleEvent, counted_events
from analyzer.store import InfluxClient, load_events
from analyzer.store.evidence_store import settings_from_parameters
from sensor.wire import DEVICE_ID_PATTERN

NS = 1_000_000_000
PAD_NS = 120 * NS  # the plots show two minutes either side of the finding's span
# A calibration is recorded with its date (sensor [calibration] date, ISO 8601); a level stored
# without one ("", or the demo's "demo") was measured on the uncalibrated default full scale.
CALIBRATION_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class WindowEvidence:
    """One linked window with the stored data behind it (empty when InfluxDB had none)."""

    check: LinkCheck
    events: list[RuleEvent] = field(default_factory=list)
    levels: list[tuple[int, float]] = field(default_factory=list)  # (time_ns, LAeq dB) per s
    calibration_dates: list[str] = field(default_factory=list)
    full_scale_db: list[float] = field(default_factory=list)
    read_error: str = ""
    uncalibrated_levels: int = 0  # seconds stored without a calibration date

    @property
    def calibrated(self) -> bool:
        """Whether the levels carry calibration dates (ISO 8601), none without one (the review
        page reads the distinct dates only: ``uncalibrated_levels`` 0 there)."""
        return (bool(self.calibration_dates) and self.uncalibrated_levels == 0
                and all(CALIBRATION_DATE.match(d) for d in self.calibration_dates))

    @property
    def fields(self) -> dict[str, Any]:
        """The stored window's content ({} when it could not be read)."""
        return self.check.fields or {}

    def counted(self) -> list[RuleEvent]:
        """The events the rule counts under the window's parameters (intermittent, or
        continuous when audibility binds it: only those plainly audible 100 ft from the
        premises, subd. 5; intermittent ones only in company, schema 3 on). A window whose
        parameters cannot be read: the plainly audible events of an intermittent one."""
        try:
            settings = settings_from_parameters(self.fields.get("parameters", {}))
        except (AnalyzerError, ValueError, TypeError):
            settings = None
        if settings is not None:
            return counted_events(self.check.link.rule, settings, self.events)
        binds = str(self.fields.get("parameters", {}).get("audibility_binds_continuous"))
        if self.check.link.rule == "intermittent" or binds == "True" or binds == "true":
            return [e for e in self.events if e.plainly_audible is True]
        return list(self.events)


@dataclass(frozen=True)
class ReportData:
    """Everything one report shows."""

    view: CaseView
    windows: list[WindowEvidence]
    generated_ns: int
    software_version: str
    redacted: bool
    reviews: dict[int, EventReview] = field(default_factory=dict)  # by link id (section 9)


def _levels(client: InfluxClient, device_id: str, start_ns: int, end_ns: int
            ) -> tuple[list[tuple[int, float]], list[str], list[float], int]:
    if not DEVICE_ID_PATTERN.match(device_id):
        raise ValueError(f"device id {device_id!r} is not valid")
    series = client.query(
        f"SELECT laeq_db, calibration_date, full_scale_db FROM level WHERE device = "
        f"'{device_id}' AND time >= {start_ns} AND time <= {end_ns} ORDER BY time ASC")
    rows = [v for s in series for v in s["values"]]
    levels = [(int(t), float(laeq)) for t, laeq, _, _ in rows if laeq is not None]
    dates = sorted({str(d) for _, _, d, _ in rows if d})
    scales = sorted({float(f) for _, _, _, f in rows if f is not None})
    undated = sum(1 for _, laeq, d, _ in rows
                  if laeq is not None and not CALIBRATION_DATE.match(str(d or "")))
    return levels, dates, scales, undated


def window_evidence(client: InfluxClient, check: LinkCheck) -> WindowEvidence:
    """Read the events and levels around one linked window."""
    link = check.link
    try:
        events = load_events(client, link.device_id, link.start_ns - PAD_NS,
                             link.end_ns + PAD_NS)
        levels, dates, scales, undated = _levels(client, link.device_id,
                                                 link.start_ns - PAD_NS, link.end_ns + PAD_NS)
    except Exception as exc:  # noqa: BLE001 - the report says what could not be read
        return WindowEvidence(check, read_error=f"{type(exc).__name__}: {exc}")
    return WindowEvidence(check, events, levels, dates, scales, uncalibrated_levels=undated)


def gather(store: CaseStore, complaint_id: int, client: InfluxClient, redacted: bool = False,
           now_ns: int | None = None) -> ReportData:
    """The case as read now, with the stored data behind each linked window."""
    view = read_case(store, complaint_id, client)
    windows = [window_evidence(client, c) for c in view.checks]
    reviews = review_links(store, client, [(w.check, w.events) for w in windows
                                           if not w.read_error])
    return ReportData(view, windows, time.time_ns() if now_ns is None else now_ns, __version__,
                      redacted, reviews)
