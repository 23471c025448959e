"""The ordinance: the two rules over events, coverage, evidence windows and their digests."""

from __future__ import annotations

from analyzer.ordinance.coverage import Coverage
from analyzer.ordinance.evidence import (
    ADDED_IN_SCHEMA_3,
    GENESIS_DIGEST,
    EvidenceChain,
    EvidenceWindow,
    finite_json,
    progress_payload,
    progress_topic,
    seal,
    sha256_hex,
)
from analyzer.ordinance.findings import DeviceRules, findings_for_events
from analyzer.ordinance.rules import (
    NS,
    Progress,
    RuleEvent,
    RuleInputError,
    RuleSettings,
    chain_order,
    counted_events,
    evaluate,
    rule_event,
)

__all__ = [
    "ADDED_IN_SCHEMA_3",
    "Coverage",
    "DeviceRules",
    "EvidenceChain",
    "EvidenceWindow",
    "GENESIS_DIGEST",
    "NS",
    "Progress",
    "RuleEvent",
    "RuleInputError",
    "RuleSettings",
    "chain_order",
    "counted_events",
    "evaluate",
    "findings_for_events",
    "finite_json",
    "progress_payload",
    "progress_topic",
    "rule_event",
    "seal",
    "sha256_hex",
]
