"""``barkwatch analyze``: the pipeline on sound files, printed as JSON lines or for a reader."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, TextIO

from analyzer.cli.progress import progress_bar
from analyzer.cli.site import load_site_record
from analyzer.config import AnalyzerConfig, load_analyzer_config
from analyzer.errors import AnalyzerError
from analyzer.offline import analyze
from sensor.errors import SensorError

log = logging.getLogger("barkwatch")


def run_analyze(args: argparse.Namespace) -> int:
    """Analyse every file; one file's trouble never stops the others. Exit status 1 if any
    failed."""
    config = load_analyzer_config(args.config) if args.config else AnalyzerConfig()
    site = load_site_record(args.site) if args.site else None
    failed: list[str] = []
    for path in args.files:
        try:
            with progress_bar(Path(path).name, "s", args.quiet) as progress:
                analysis = analyze(
                    path, args.full_scale_db, args.include_frames, config.detector, site,
                    config.audibility, config.rules, progress=progress,
                )
            try:
                if args.format == "json":
                    analysis.write_json(sys.stdout)
                    sys.stdout.flush()
                else:
                    write_text(analysis.document, path, sys.stdout)
            finally:
                analysis.close()
        except (SensorError, AnalyzerError) as exc:
            named = str(exc) if path in str(exc) else f"{path}: {exc}"
            print(f"barkwatch: error: {named}", file=sys.stderr)
            failed.append(path)
            continue
        except Exception:  # a defect: say so with its traceback, and go on
            log.exception("%s: analysis failed unexpectedly", path)
            failed.append(path)
            continue
        if analysis.failed:
            print(f"barkwatch: error: {analysis.document['failure']['reason']}", file=sys.stderr)
            failed.append(path)
    if failed:
        print(f"barkwatch: {len(failed)} of {len(args.files)} file(s) failed: "
              + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


def _duration(seconds: float) -> str:
    """``7 min``, ``7 min 12.50 s``, ``45.00 s``: a duration as a reader says it, to the
    hundredth of a second the spans are printed with (so 7:00.04, a violation, never reads
    as exactly 7 min)."""
    minutes, rest_s = divmod(round(seconds, 2), 60)
    if not minutes:
        return f"{rest_s:.2f} s"
    return f"{minutes:.0f} min" + (f" {rest_s:.2f} s" if rest_s else "")


def _event_line(event: dict[str, Any], with_site: bool) -> str:
    line = (f"  {event['onset_s']:8.2f}-{event['offset_s']:8.2f} s  {event['label']}"
            f"  conf {event['confidence']:.2f}  LAeq {event['laeq_db']:.1f} dB"
            f"  LAFmax {event['lafmax_db']:.1f} dB")  # fmt: skip
    if not with_site:
        return line
    if event["level_at_100ft_db"] is None:
        return line + "  at 100 ft: not assessed"
    decision = "plainly audible" if event["plainly_audible"] else "not plainly audible"
    return (line + f"  at 100 ft {event['level_at_100ft_db']:.1f} dB"
            f" (±{event['uncertainty_db']:.1f})  margin {event['audibility_margin_db']:+.1f} dB"
            f"  {decision}")  # fmt: skip


def _rules_line(rules: dict[str, Any]) -> str:
    return (f"continuous: more than {_duration(rules['continuous_limit_s'])} with gaps under "
            f"{rules['continuity_gap_s']:g} s; intermittent: more than "
            f"{_duration(rules['intermittent_limit_s'])} of plainly audible events with gaps "
            f"under {rules['intermittency_gap_s']:g} s")  # fmt: skip


def _finding_line(finding: dict[str, Any]) -> str:
    verdict = "VIOLATION" if finding["violation"] else "no violation"
    return (f"  {finding['rule']}: {finding['start_s']:.2f}-{finding['end_s']:.2f} s "
            f"({_duration(finding['duration_s'])}), {verdict} ({finding['status']}); "
            f"{finding['events_counted']} of {finding['events_in_span']} events counted, "
            f"longest gap {finding['longest_gap_s']:.1f} s; {finding['reading']}")  # fmt: skip


def write_text(document: dict[str, Any], path: str, out: TextIO) -> None:
    """The document for a reader: the calibration assumed, each event (with ``--site`` its
    level 100 ft beyond the boundary, margin and plainly-audible decision), the findings."""
    print(f"{path}: {document['duration_s']:.1f} s, {len(document['events'])} dog "
          f"event(s), max dog score {document['max_dog_score']:.2f}", file=out)
    full_scale_db = document["full_scale_db"]
    print(f"  calibration assumed: an RMS of digital full scale reads {full_scale_db:g} dB SPL "
          "(full_scale_db; --full-scale-db L, from the sensor's calibration)", file=out)
    audibility = document["audibility"]
    if audibility is not None:
        site = audibility["site"]
        print(f"  site {site['address'] or '(no address)'}: dog {site['source_to_sensor_m']:g} m "
              f"from the sensor, {site['source_to_boundary_m']:g} m from the boundary; levels "
              f"carried to {audibility['receiver']}; plainly audible there with a margin of "
              f"{audibility['settings']['margin_db']:g} dB or more over the threshold of "
              "hearing and the background (docs/AUDIBILITY.md)", file=out)  # fmt: skip
    else:
        print("  no installation record (--site FILE): no level at 100 ft, no plainly-audible "
              "decision", file=out)
    for warning in document.get("warnings", []):
        print(f"  warning: {warning}", file=out)
    for event in document["events"]:
        print(_event_line(event, audibility is not None), file=out)
    findings = document["findings"]
    if findings:
        print(f"  findings ({_rules_line(document['rules'])}):", file=out)
        for finding in findings:
            print(_finding_line(finding), file=out)
    else:
        print(f"  findings: none ({_rules_line(document['rules'])})", file=out)
    origins = document.get("origins", {})
    if origins.get("premises", 0) or origins.get("elsewhere", 0):  # bearings: whose dog
        print(f"  by bearing: {origins['premises']} event(s) from the premises' sector, "
              f"{origins['elsewhere']} from elsewhere, {origins['no bearing']} with no "
              "bearing (docs/BEARING.md); findings from the premises:", file=out)
        for finding in document["findings_from_premises"]:
            print(_finding_line(finding), file=out)
        if not document["findings_from_premises"]:
            print("    none", file=out)
    if "failure" in document:
        print(f"  FAILED at {document['failure']['time_s']:.3f} s (sample "
              f"{document['failure']['sample_index']}); the lines above cover the audio "
              "before it", file=out)
