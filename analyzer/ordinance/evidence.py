"""Evidence windows: the stored record of a finding, its canonical form and a chained digest.

An evidence window (DESIGN.md section 4) states everything a finding rests on: device, site,
span, rule and how it was read, the events counted, the longest gap, levels, audibility
margins, uncertainty, coverage gaps, sensitivity, classifier and software versions and the
parameters. Its **content** is serialised canonically (docs/RULES.md, "Evidence digest"):

- JSON with keys sorted, separators ``,`` and ``:``, ASCII only (``\\uXXXX`` escapes);
- every float written as a string with exactly six decimals (``"63.120000"``, never ``-0``);
  integers (ns times, counts) as JSON integers; booleans and null as JSON literals.

``events_sha256`` is the SHA-256 of the canonical list of the events the finding rests on
(every event with onset in the span, counted or not); ``digest`` is the SHA-256 of the
canonical content, which includes ``events_sha256`` and ``prev_digest`` (the digest of the
device's previous window in chain order, 64 zeros for the first). Changing one stored event,
one window or removing a window is therefore detectable.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any

from analyzer import __version__
from analyzer.acoustics.attribution import PremisesSector
from analyzer.errors import AnalyzerError
from analyzer.ordinance.premises import premises_count
from analyzer.ordinance.rules import (
    COMPLETED,
    CONTINUOUS,
    NS,
    SENSITIVITY_CONTINUITY_GAPS_S,
    SENSITIVITY_INTERMITTENCY_GAPS_S,
    Finding,
    Progress,
    RuleEvent,
)

# Schema 2 (issue 36) adds ``from_premises`` (:mod:`analyzer.ordinance.premises`) and each
# event's bearing and origin to the events it rests on; schema 3 the parameter
# ``intermittent_company_s`` (issue 39: an intermittent event counts only in company). A window
# is recomputed in the schema it was sealed in; those of schemas 1 and 2 were read without
# company (their parameters lack it: 0).
SCHEMA = "barkwatch.evidence_window/3"
SCHEMA_V2 = "barkwatch.evidence_window/2"
SCHEMA_V1 = "barkwatch.evidence_window/1"
SCHEMAS = (SCHEMA, SCHEMA_V2, SCHEMA_V1)
ADDED_IN_SCHEMA_3 = "intermittent_company_s"
BEARING_EVENT_FIELDS = ("bearing_deg", "bearing_uncertainty_deg", "origin")
GENESIS_DIGEST = "0" * 64
FLOAT_DECIMALS = 6
PROGRESS_TOPIC = "barkwatch/v1/progress/{device}"
AUDIBILITY_EVENT_FIELDS = ("plainly_audible", "audibility_margin_db", "level_at_100ft_db",
                           "uncertainty_db", "audibility_score")


class EvidenceError(AnalyzerError):
    """A value cannot be serialised canonically, or a window cannot be sealed."""


def _canonical_value(value: Any, where: str) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EvidenceError(f"{where} is {value}: not representable in evidence")
        text = f"{value:.{FLOAT_DECIMALS}f}"
        return text[1:] if text.startswith("-") and float(text) == 0.0 else text
    if isinstance(value, Mapping):
        return {str(k): _canonical_value(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise EvidenceError(f"{where} has type {type(value).__name__}: not canonicalisable")


def _non_finite_path(value: Any, where: str) -> str | None:
    """Where in JSON-like ``value`` the first NaN or infinity is, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} is {value}"
    if isinstance(value, Mapping):
        items: Iterable[tuple[Any, Any]] = ((f"{where}.{k}", v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next((p for w, v in items if (p := _non_finite_path(v, w)) is not None), None)


def finite_json(value: Any, where: str = "value", **dumps_options: Any) -> str:
    """``json.dumps`` that never writes NaN or Infinity: they are not JSON and readers refuse
    them. A value that may legitimately be missing is written as null (None) by its producer;
    a non-finite number raises EvidenceError naming where it is (``where`` names the whole)."""
    try:
        return json.dumps(value, allow_nan=False, **dumps_options)
    except ValueError as exc:
        path = _non_finite_path(value, where)
        if path is None:
            raise
        raise EvidenceError(f"{path}: JSON has no NaN or infinity") from exc


def canonical_json(value: Any) -> str:
    """The canonical serialisation (module docstring) of JSON-like ``value``."""
    return json.dumps(_canonical_value(value, "value"), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True)


def sha256_hex(text: str) -> str:
    """SHA-256 of ``text`` as UTF-8, lower-case hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def event_record(event: RuleEvent, schema: str = SCHEMA) -> dict[str, Any]:
    """The event as it enters the digest (every stored field of a ``dog_event`` point; its
    bearing and origin from schema 2 on)."""
    bearing = {} if schema == SCHEMA_V1 else {
        name: getattr(event, name) for name in BEARING_EVENT_FIELDS}
    return {
        "device": event.device_id, "onset_ns": event.onset_ns, "offset_ns": event.offset_ns,
        "label": event.label, "confidence": event.confidence, "laeq_db": event.laeq_db,
        "lafmax_db": event.lafmax_db, "model_version": event.model_version,
        **{name: getattr(event, name) for name in AUDIBILITY_EVENT_FIELDS}, **bearing,
    }


def events_digest(events: Iterable[RuleEvent], schema: str = SCHEMA) -> str:
    """SHA-256 of the canonical list of ``events`` (in capture order)."""
    ordered = sorted(events, key=lambda e: e.key)
    return sha256_hex(canonical_json([event_record(e, schema) for e in ordered]))


def dog_event_fields(event: RuleEvent) -> dict[str, bool | float]:
    """Audibility fields to store on the event's ``dog_event`` point (absent when None)."""
    fields = {name: getattr(event, name) for name in AUDIBILITY_EVENT_FIELDS}
    return {name: value for name, value in fields.items() if value is not None}


def group_spans(events: Iterable[RuleEvent], gap_ns: int) -> list[tuple[int, int, int]]:
    """(start, end, count) of the groups that ``events`` form with gaps under ``gap_ns``;
    a gap is measured from the latest end so far to the next onset (events sorted here)."""
    spans: list[tuple[int, int, int]] = []
    for e in sorted(events, key=lambda ev: ev.key):
        if spans and e.onset_ns - spans[-1][1] < gap_ns:
            start, end, count = spans[-1]
            spans[-1] = (start, max(end, e.offset_ns), count + 1)
        else:
            spans.append((e.onset_ns, e.offset_ns, 1))
    return spans


def sensitivity(finding: Finding) -> list[dict[str, object]]:
    """Whether the finding holds with the rule's gap at each of the documented alternatives.

    A smaller gap can only split the group: its longest part is re-derived from the counted
    events. A gap at least the configured one can only merge: it still holds and
    ``longest_s`` is the finding's own duration (a lower bound).
    """
    configured = finding.settings.gap_ns(finding.rule)
    limit = finding.settings.limit_ns(finding.rule)
    gaps = (SENSITIVITY_CONTINUITY_GAPS_S if finding.rule == CONTINUOUS
            else SENSITIVITY_INTERMITTENCY_GAPS_S)
    rows: list[dict[str, object]] = []
    for gap_s in gaps:
        gap = round(gap_s * NS)
        longest = finding.end_ns - finding.start_ns
        if gap < configured:
            longest = max(end - start for start, end, _ in group_spans(finding.counted, gap))
        rows.append({"gap_s": gap_s, "holds": longest > limit, "longest_s": longest / NS})
    return rows


def _energy_mean_db(levels: Sequence[float], weights: Sequence[float]) -> float | None:
    if not levels:
        return None
    total = sum(weights)
    if total <= 0.0:
        weights, total = [1.0] * len(levels), float(len(levels))
    energy = sum(w * 10.0 ** (x / 10.0) for x, w in zip(levels, weights, strict=True)) / total
    return round(10.0 * math.log10(energy), 2)


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def longest_gap_s(events: Sequence[RuleEvent]) -> float:
    """Longest gap between counted events (latest end so far to next onset), s; 0 if none."""
    longest, end = 0, None
    for e in sorted(events, key=lambda ev: ev.key):
        if end is not None:
            longest = max(longest, e.onset_ns - end)
        end = e.offset_ns if end is None else max(end, e.offset_ns)
    return longest / NS


def window_fields(finding: Finding, prev_digest: str, site: str,
                  software_version: str = __version__, sector: PremisesSector | None = None,
                  schema: str = SCHEMA) -> dict[str, Any]:
    """The window's content as plain JSON-ready values (floats rounded, not yet canonical);
    ``sector`` the premises' sector the events were attributed against (schema 2 on)."""
    if schema not in SCHEMAS:
        raise EvidenceError(f"evidence window schema {schema!r} is not known (this software "
                            f"seals {SCHEMA} and recomputes {SCHEMA_V2} and {SCHEMA_V1})")
    parameters = asdict(finding.settings)
    if schema != SCHEMA and parameters.pop(ADDED_IN_SCHEMA_3):
        raise EvidenceError(f"a {schema} window has no {ADDED_IN_SCHEMA_3}: a finding read "
                            "with company is sealed as " + SCHEMA)
    counted = finding.counted
    margins = [e.audibility_margin_db for e in counted if e.audibility_margin_db is not None]
    at_100ft = [e.level_at_100ft_db for e in counted if e.level_at_100ft_db is not None]
    uncertainty = [e.uncertainty_db for e in counted if e.uncertainty_db is not None]
    scores = [e.audibility_score for e in counted if e.audibility_score is not None]
    gaps = finding.coverage_gaps
    premises = {} if schema == SCHEMA_V1 else {
        "from_premises": premises_count(finding, sector)}
    return {
        "schema": schema, "device": finding.device_id, "site": site, "rule": finding.rule,
        "status": finding.status, "violation": True,
        "start_ns": finding.start_ns, "end_ns": finding.end_ns,
        "duration_s": finding.duration_s, "threshold_crossed_ns": finding.threshold_crossed_ns,
        "close_ns": finding.close_ns, "reading": finding.settings.reading(finding.rule),
        "events_counted": len(counted), "events_in_span": len(finding.events),
        "audible_events": sum(e.plainly_audible is True for e in finding.events),
        "audibility_unknown_events": sum(e.plainly_audible is None for e in finding.events),
        "longest_gap_s": longest_gap_s(counted),
        "levels": {
            "laeq_db": _energy_mean_db([e.laeq_db for e in counted],
                                       [(e.offset_ns - e.onset_ns) / NS for e in counted]),
            "lafmax_db": _r(max((e.lafmax_db for e in counted), default=None)),
            "level_at_100ft_db_max": _r(max(at_100ft, default=None)),
            "level_at_100ft_db_mean": _energy_mean_db(at_100ft, [1.0] * len(at_100ft)),
        },
        "audibility": {
            "assessed_events": len(margins),
            "margin_db_min": _r(min(margins, default=None)),
            "margin_db_median": _r(median(margins) if margins else None),
            "margin_db_max": _r(max(margins, default=None)),
            "score_max": _r(max(scores, default=None), 3),
        },
        "uncertainty_db": _r(max(uncertainty, default=None)),
        "coverage": {
            "uncovered_s": sum(b - a for a, b in gaps) / NS,
            "gaps_ns": [[a, b] for a, b in gaps],
            "uncovered_after_end_s": finding.uncovered_after_end_ns / NS,
        },
        "sensitivity": sensitivity(finding),
        "model_versions": sorted({e.model_version for e in finding.events}),
        "software_version": software_version,
        "parameters": parameters,
        "events_sha256": events_digest(finding.events, schema),
        "prev_digest": prev_digest,
        **premises,
    }


@dataclass(frozen=True)
class EvidenceWindow:
    """A sealed window: the canonical content (as hashed and stored) and its digest."""

    device_id: str
    rule: str
    start_ns: int
    close_ns: int
    content: str
    digest: str

    @property
    def fields(self) -> dict[str, Any]:
        """The content parsed back (floats are the canonical six-decimal strings)."""
        return dict(json.loads(self.content))


def seal(finding: Finding, prev_digest: str, site: str,
         software_version: str = __version__, sector: PremisesSector | None = None,
         schema: str = SCHEMA) -> EvidenceWindow:
    """Seal a completed finding into an evidence window chained to ``prev_digest``."""
    if finding.status != COMPLETED:
        raise EvidenceError(f"{finding.rule} finding of {finding.device_id} at "
                            f"{finding.start_ns} ns is {finding.status}; only completed "
                            "findings are sealed")
    content = canonical_json(window_fields(finding, prev_digest, site, software_version,
                                           sector, schema))
    return EvidenceWindow(finding.device_id, finding.rule, finding.start_ns, finding.close_ns,
                          content, sha256_hex(content))


class EvidenceChain:
    """The head of each device's chain; seal completed findings in the order the engine
    returns them (chain order). Live: load the heads from storage at start-up. ``sectors``:
    each device's premises' sector, stated in its windows (none: not entered)."""

    def __init__(self, site_by_device: Mapping[str, str] | None = None,
                 heads: Mapping[str, str] | None = None,
                 software_version: str = __version__,
                 sectors: Mapping[str, PremisesSector | None] | None = None) -> None:
        self.sites = dict(site_by_device or {})
        self.heads = dict(heads or {})
        self.software_version = software_version
        self.sectors = dict(sectors or {})

    def seal(self, finding: Finding) -> EvidenceWindow:
        """Seal ``finding`` after the device's previous window and advance the head."""
        window = seal(finding, self.heads.get(finding.device_id, GENESIS_DIGEST),
                      self.sites.get(finding.device_id, ""), self.software_version,
                      self.sectors.get(finding.device_id))
        self.heads[finding.device_id] = window.digest
        return window


def progress_payload(progress: Progress) -> dict[str, Any]:
    """JSON payload for MQTT ``barkwatch/v1/progress/<device>`` (retained, QoS 1)."""
    return {
        "device_id": progress.device_id, "time_ns": progress.time_ns,
        "episode_s": round(progress.episode_s, 3), "episode_start_ns": progress.episode_start_ns,
        "episode_events": progress.episode_events,
        "continuous_limit_s": progress.continuous_limit_s,
        "episode_violation": progress.episode_s > progress.continuous_limit_s,
        "stretch_s": round(progress.stretch_s, 3), "stretch_start_ns": progress.stretch_start_ns,
        "stretch_events": progress.stretch_events,
        "intermittent_limit_s": progress.intermittent_limit_s,
        "stretch_violation": progress.stretch_s > progress.intermittent_limit_s,
        "late_events": progress.late_events, "provisional": True,
    }


def progress_topic(device_id: str) -> str:
    """The MQTT topic of a device's progress."""
    return PROGRESS_TOPIC.format(device=device_id)
