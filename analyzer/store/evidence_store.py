"""Evidence in InfluxDB: read events, coverage and windows back, and recompute findings.

Recomputation (``barkwatch findings recompute``) re-reads the stored ``dog_event`` points
(with their audibility fields) and the coverage (the scored ``level`` points: those with a
``max_dog_score`` field, one second each), runs the rules with the parameters printed in the
stored windows, re-seals every finding with the stored window's ``prev_digest``, site,
software version, schema and premises' sector (issue 36: the events' stored origins give its
``from_premises``), and compares the canonical content byte for byte. It also checks each
stored window's own digest and that the chain has no missing link and no fork.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from analyzer.acoustics.attribution import NO_BEARING, PremisesSector
from analyzer.ordinance import (
    ADDED_IN_SCHEMA_3,
    GENESIS_DIGEST,
    NS,
    EvidenceWindow,
    RuleEvent,
    RuleInputError,
    RuleSettings,
    chain_order,
    evaluate,
    seal,
    sha256_hex,
)
from analyzer.store.influx import InfluxClient
from sensor.wire import DEVICE_ID_PATTERN

FRAME_NS = NS  # a frame is one second of capture time (docs/WIRE.md, "Wire format v2")
PAGE_ROWS = 10000


def _device_clause(device_id: str) -> str:
    if not DEVICE_ID_PATTERN.match(device_id):
        raise RuleInputError(f"device id {device_id!r} does not match "
                             f"{DEVICE_ID_PATTERN.pattern}")
    return f"device = '{device_id}'"


def _rows(client: InfluxClient, select: str, where: str, start_ns: int,
          end_ns: int) -> list[dict[str, Any]]:
    """Rows of ``SELECT select ... WHERE where`` with start <= time <= end, paged by time."""
    rows: list[dict[str, Any]] = []
    low, op = start_ns, ">="
    while True:
        series = client.query(f"SELECT {select} WHERE {where} AND time {op} {low} AND "
                              f"time <= {end_ns} ORDER BY time ASC LIMIT {PAGE_ROWS}")
        page = [dict(zip(s["columns"], v, strict=True)) for s in series for v in s["values"]]
        rows.extend(page)
        if len(page) < PAGE_ROWS:
            return rows
        low, op = int(page[-1]["time"]), ">"


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def load_events(client: InfluxClient, device_id: str, start_ns: int,
                end_ns: int) -> list[RuleEvent]:
    """The stored ``dog_event`` points of a device with onset in [start_ns, end_ns], with
    their origin and bearing (the windows' ``from_premises`` count the origins)."""
    rows = _rows(client, "* FROM dog_event", _device_clause(device_id), start_ns, end_ns)
    return [
        RuleEvent(
            device_id=device_id, onset_ns=int(r["time"]), offset_ns=int(r["offset_ns"]),
            label=str(r["label"]), confidence=float(r["confidence"]),
            laeq_db=float(r["laeq_db"]), lafmax_db=float(r["lafmax_db"]),
            model_version=str(r["model_version"]),
            plainly_audible=None if r.get("plainly_audible") is None
            else bool(r["plainly_audible"]),
            audibility_margin_db=_float(r.get("audibility_margin_db")),
            level_at_100ft_db=_float(r.get("level_at_100ft_db")),
            uncertainty_db=_float(r.get("uncertainty_db")),
            audibility_score=_float(r.get("audibility_score")),
            bearing_deg=_float(r.get("bearing_deg")),
            bearing_uncertainty_deg=_float(r.get("bearing_uncertainty_deg")),
            origin=str(r.get("origin") or NO_BEARING),  # absent: stored before issue 36
        )
        for r in rows
    ]


def load_coverage(client: InfluxClient, device_id: str, start_ns: int,
                  end_ns: int) -> list[tuple[int, int]]:
    """Measured intervals: one second per scored ``level`` point starting in the range."""
    rows = _rows(client, "max_dog_score FROM level", _device_clause(device_id), start_ns, end_ns)
    return [(int(r["time"]), int(r["time"]) + FRAME_NS) for r in rows]


@dataclass(frozen=True)
class StoredWindow:
    """An ``evidence_window`` point as read back."""

    window: EvidenceWindow
    prev_digest: str
    fields: dict[str, Any]


def load_windows(client: InfluxClient, device_id: str, start_ns: int,
                 end_ns: int) -> list[StoredWindow]:
    """Stored windows of a device whose span starts in [start_ns, end_ns]."""
    rows = _rows(client, "* FROM evidence_window", _device_clause(device_id), start_ns, end_ns)
    return [
        StoredWindow(EvidenceWindow(device_id, str(r["rule"]), int(r["time"]),
                                    int(r["close_ns"]), str(r["content"]), str(r["digest"])),
                     str(r["prev_digest"]), r)
        for r in rows
    ]


def load_chain_head(client: InfluxClient, device_id: str) -> str:
    """Digest of the device's last window in chain order (live start-up), or genesis."""
    rows = _rows(client, "close_ns, digest FROM evidence_window", _device_clause(device_id),
                 0, 2**63 - 1)
    if not rows:
        return GENESIS_DIGEST
    return str(max(rows, key=lambda r: (int(r["close_ns"]), str(r["digest"])))["digest"])


def settings_from_parameters(parameters: dict[str, Any]) -> RuleSettings:
    """RuleSettings from a window's ``parameters`` (canonical strings accepted); a window
    sealed before schema 3 lacks ``intermittent_company_s`` and was read without company."""
    hints = typing.get_type_hints(RuleSettings)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(RuleSettings):
        if f.name not in parameters:
            if f.name != ADDED_IN_SCHEMA_3:
                raise RuleInputError(f"stored parameters lack {f.name!r}")
            values[f.name] = 0.0
            continue
        raw = parameters[f.name]
        values[f.name] = raw if hints[f.name] is bool else float(raw)
    return RuleSettings(**values)


@dataclass(frozen=True)
class Mismatch:
    """One disagreement between storage and recomputation."""

    kind: str  # tampered | differs | missing_in_storage | not_recomputed | chain
    rule: str
    start_ns: int
    detail: str


@dataclass
class RecomputeReport:
    """What recomputing a device's findings over a range found."""

    device_id: str
    stored: int = 0
    recomputed: int = 0
    verified: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every stored window was re-derived exactly and the chain is whole."""
        return not self.mismatches


def _differing_keys(stored: str, recomputed: str) -> list[str]:
    try:
        a, b = json.loads(stored), json.loads(recomputed)
    except json.JSONDecodeError:
        return ["<content is not JSON>"]
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def recompute(client: InfluxClient, device_id: str, start_ns: int, end_ns: int,
              default_settings: RuleSettings | None = None,
              current_software_version: str | None = None) -> RecomputeReport:
    """Re-derive the findings of windows starting in [start_ns, end_ns] and compare them."""
    report = RecomputeReport(device_id)
    stored = load_windows(client, device_id, start_ns, end_ns)
    report.stored = len(stored)
    by_params: dict[str, list[StoredWindow]] = {}
    for s in stored:
        if sha256_hex(s.window.content) != s.window.digest:
            report.mismatches.append(Mismatch("tampered", s.window.rule, s.window.start_ns,
                                              "stored content does not hash to its digest"))
        params = json.loads(s.window.content).get("parameters", {})
        by_params.setdefault(json.dumps(params, sort_keys=True), []).append(s)
        version = json.loads(s.window.content).get("software_version")
        if current_software_version and version != current_software_version:
            report.notes.append(f"window at {s.window.start_ns} was made by software "
                                f"{version}; recomputed with {current_software_version}")
    sets = [(settings_from_parameters(json.loads(p)), group) for p, group in by_params.items()]
    if not sets:
        sets = [(default_settings or RuleSettings(), [])]
    pad = max(max(s.continuity_gap_s, s.intermittency_gap_s) for s, _ in sets)
    pad_ns = round(pad * NS)
    low = min([start_ns, *(s.window.start_ns for s in stored)]) - pad_ns
    high = max([end_ns, *(int(s.fields["end_ns"]) for s in stored)]) + pad_ns
    events = load_events(client, device_id, low, high)
    coverage = load_coverage(client, device_id, low - FRAME_NS, high + pad_ns)
    for settings, group in sets:
        found = [f for f in chain_order(evaluate(device_id, events, coverage, settings))
                 if start_ns <= f.start_ns <= end_ns]
        report.recomputed += len(found)
        _compare(report, found, group, check_missing=len(sets) == 1)
    _check_chain(client, device_id, stored, report)
    return report


def stored_sector(fields: dict[str, Any]) -> PremisesSector | None:
    """The premises' sector a stored window states it was judged against, or None."""
    sector = (fields.get("from_premises") or {}).get("sector")
    if not sector:
        return None
    return PremisesSector(float(sector["bearing_deg"]), float(sector["half_width_deg"]))


def _compare(report: RecomputeReport, found: list[Any], group: list[StoredWindow],
             check_missing: bool) -> None:
    index = {(s.window.rule, s.window.start_ns): s for s in group}
    for finding in found:
        s = index.pop((finding.rule, finding.start_ns), None)
        if s is None:
            if check_missing:
                report.mismatches.append(Mismatch(
                    "missing_in_storage", finding.rule, finding.start_ns,
                    f"recomputed {finding.duration_s:.1f} s {finding.rule} finding is not "
                    "stored"))
            continue
        stored_fields = json.loads(s.window.content)
        again = seal(finding, s.prev_digest, str(stored_fields.get("site", "")),
                     str(stored_fields.get("software_version", "")),
                     stored_sector(stored_fields), str(stored_fields.get("schema", "")))
        if again.content == s.window.content and again.digest == s.window.digest:
            report.verified += 1
        else:
            keys = _differing_keys(s.window.content, again.content)
            report.mismatches.append(Mismatch("differs", finding.rule, finding.start_ns,
                                              "recomputed window differs in " + ", ".join(keys)))
    for (rule, start), _ in sorted(index.items()):
        report.mismatches.append(Mismatch("not_recomputed", rule, start,
                                          "stored window is not re-derived from stored events"))


def _check_chain(client: InfluxClient, device_id: str, stored: list[StoredWindow],
                 report: RecomputeReport) -> None:
    digests = {s.window.digest for s in stored}
    seen: dict[str, StoredWindow] = {}
    for s in sorted(stored, key=lambda w: (w.window.close_ns, w.window.rule)):
        if s.prev_digest in seen:
            report.mismatches.append(Mismatch(
                "chain", s.window.rule, s.window.start_ns,
                f"fork: shares prev_digest {s.prev_digest[:12]}... with the window at "
                f"{seen[s.prev_digest].window.start_ns}"))
        seen[s.prev_digest] = s
        if s.prev_digest == GENESIS_DIGEST or s.prev_digest in digests:
            continue
        well_formed = re.fullmatch("[0-9a-f]{64}", s.prev_digest) is not None
        if not well_formed or not client.query(
                "SELECT digest FROM evidence_window WHERE "
                f"{_device_clause(device_id)} AND digest = '{s.prev_digest}'"):
            report.mismatches.append(Mismatch(
                "chain", s.window.rule, s.window.start_ns,
                f"previous window {s.prev_digest[:12]}... is not in storage"))
