"""The evidence report as one self-contained HTML page (plots inline as data URIs, CSS
inline, no script), also the source of the PDF."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from analyzer.cases import VERIFIED, Complaint, format_time, shown_safely
from analyzer.cases.checklist import CONDITION_TEXT
from analyzer.ordinance import GENESIS_DIGEST
from analyzer.reports import ordinance_text as text
from analyzer.reports.bearings import bearings_plot, premises_summary
from analyzer.reports.event_review import verdicts_section, window_heading
from analyzer.reports.gather import CALIBRATION_DATE, ReportData, WindowEvidence
from analyzer.reports.paper import DEFAULT_PAPER, page_css
from analyzer.reports.plots import window_plots
from sensor.calibration import DEFAULT_FULL_SCALE_DB

WITHHELD = "[withheld]"
NS = 1_000_000_000
LONGEST_UNBROKEN = 30  # characters of a run without spaces before a break is allowed
_RUNS = re.compile(r"(\s+)")
_DIGESTS = re.compile(r"\b([0-9a-f]{64})\b")  # SHA-256 digests in running text

# Table cells break a word only when it is longer than the cell (break-word), and long runs
# without spaces carry <wbr> (_e). With ``overflow-wrap: anywhere`` WeasyPrint's table layout
# cost grows with the square of a cell's length (measured here, one cell of prose: 1,000
# characters 1.8 s of CPU, 2,000 8.6 s; issue 33: 4,000 31 s); with break-word 0.07 s for
# 2,000, 0.12 s for 4,000, 2.6 s for 100,000. Digests (.mono, 64 hex digits) break anywhere.
# The checklist's and the digests' tables (.fixed) have set column widths, each wide enough
# for the longest word it holds ("supported", "intermittent") on a page of Letter or A4
# (46 em of text), so WeasyPrint never narrows a column until break-word splits a word (it
# did: "sho/wn/by/the/reco/rds", issue 35); on a screen narrower than 48 em they scroll
# sideways (.wide) instead.
CSS = """
body { font-family: "DejaVu Sans", Arial, sans-serif; font-size: 10.5pt; color: #111;
       max-width: 60em; margin: 1.5em auto; padding: 0 1em; background: #fff; }
h1 { font-size: 18pt; margin-bottom: 0.2em; } h2 { font-size: 14pt; border-bottom: 1px solid
#999; margin-top: 1.6em; } h3 { font-size: 12pt; }
table { border-collapse: collapse; width: 100%; margin: 0.5em 0; }
td, th { border: 1px solid #bbb; padding: 3px 6px; vertical-align: top; text-align: left;
         overflow-wrap: break-word; word-break: normal; }
table.fixed { table-layout: fixed; } table.fixed td, table.fixed th { hyphens: manual; }
@media screen { .wide { overflow-x: auto; } table.fixed { min-width: 48em; } }
.nb { white-space: nowrap; }
.digests td { font-size: 9.5pt; } .digests tbody { break-inside: avoid; }
.digests tr.digest td { border-top: none; }
figcaption { font-size: 9.5pt; color: #333; }
th { background: #eee; } .mono { font-family: "DejaVu Sans Mono", monospace; font-size: 8pt;
word-break: break-all; } .ok { color: #176117; font-weight: bold; }
.bad { color: #a00000; font-weight: bold; } .notice { border: 2px solid #a00000; padding:
0.5em; margin: 1em 0; } blockquote { border-left: 3px solid #999; margin: 0.5em 0;
padding-left: 0.8em; } img { max-width: 100%; } figure { margin: 0.6em 0;
page-break-inside: avoid; }
"""


def _e(value: object) -> str:
    """Escaped text in which a run of more than LONGEST_UNBROKEN characters without a space
    (a digest, a URL, a hostile string) may break every LONGEST_UNBROKEN characters (<wbr>),
    so no cell is wider than the page and words are never broken; a shorter one with a
    hyphen (a date, a device id) is kept on one line (.nb). Control and bidirectional
    characters (records older than the check at entry may hold them) are shown as ``\\uXXXX``
    instead of reordering or hiding what follows (issue 33)."""
    parts = []
    for run in _RUNS.split(shown_safely(str(value))):
        if len(run) > LONGEST_UNBROKEN and not run.isspace():
            run_parts = [run[i:i + LONGEST_UNBROKEN] for i in range(0, len(run),
                                                                    LONGEST_UNBROKEN)]
            parts.append("<wbr>".join(escape(piece) for piece in run_parts))
        elif "-" in run:  # a browser breaks after a hyphen: "2026-" / "06-01", "glencoe-" / "0007"
            parts.append(f"<span class='nb'>{escape(run)}</span>")
        else:
            parts.append(escape(run))
    return "".join(parts)


def _e_digests(value: object) -> str:
    """:func:`_e`, with each 64-hex-digit digest in a .mono span (it may break anywhere there,
    and only there)."""
    parts = _DIGESTS.split(str(value))
    return "".join(f"<span class='mono'>{escape(part)}</span>" if i % 2 else _e(part)
                   for i, part in enumerate(parts))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]],
           widths: Sequence[int] = (), css_class: str = "") -> str:
    """Rows of already escaped HTML, scrolling sideways where the screen is narrower. With
    ``widths`` (percent, one per column) the table's columns are set (.fixed)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    if not widths:  # on a narrow screen it too scrolls sideways rather than the page
        return f"<div class='wide'><table><tr>{head}</tr>{body}</table></div>"
    columns = "".join(f"<col style='width: {w}%'>" for w in widths)
    return (f"<div class='wide'><table class='fixed {css_class}'><colgroup>{columns}"
            f"</colgroup><tr>{head}</tr>{body}</table></div>")


def _num(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None or value == "":
        return "not available"
    return f"{float(value):.{digits}f}{unit}"


class Redactor:
    """Replaces the complainant's identity with a mark when the report is redacted."""

    def __init__(self, complaints: Sequence[Complaint], redacted: bool) -> None:
        self.redacted = redacted
        secrets = {c.complainant_name for c in complaints} | {c.complainant_contact
                                                              for c in complaints}
        self.secrets = sorted((s for s in secrets if s.strip()), key=len, reverse=True)

    def __call__(self, value: str) -> str:
        if not self.redacted:
            return value
        for secret in self.secrets:
            value = value.replace(secret, WITHHELD)
        return value


def _ordinance() -> str:
    conditions = "".join(f"<li>{_e(CONDITION_TEXT[n])}</li>" for n in range(1, 8))
    return (f"<h2>1. The ordinance</h2><p>{_e(text.SOURCE)}.</p>"
            f"<blockquote>{_e(text.SUBD_5)}</blockquote><blockquote>{_e(text.PENALTY)}"
            f"</blockquote><blockquote>{_e(text.SEIZURE_INTRO)}<ol>{conditions}</ol>"
            f"</blockquote><p>Subdivision 1, definitions:</p><blockquote>{_e(text.SUBD_1_P)}"
            f"</blockquote><p><em>{_e(text.CROSS_REFERENCE_NOTE)}</em></p>")


def _complaint(data: ReportData, redact: Redactor) -> str:
    view = data.view
    c, a = view.complaint, view.address
    complainant = (WITHHELD + " (redacted export)" if data.redacted else
                   f"{_e(c.complainant_name)}, {_e(c.complainant_contact)} "
                   "<strong>(personal data)</strong>")
    rows = [
        ("Premises", _e(a.premises)),
        ("Owner or custodian", _e(a.owner_name or "not recorded")
         + (f", {_e(a.owner_contact)}" if a.owner_contact else "")),
        ("Complainant", complainant + f" &mdash; {_e(c.complainant_role.replace('_', ' '))}"),
        ("Received", _e(format_time(c.received_ns)) + f" by {_e(c.officer)}"),
        ("Barking complained about", _e(f"{format_time(c.span_start_ns)} to "
                                        f"{format_time(c.span_end_ns)}")),
        ("Contemporaneous", "yes" if c.contemporaneous else "no"),
        ("Notes", _e(redact(c.notes)) or "none"),
    ]
    for p in view.placements:
        until = format_time(p.removed_ns) if p.removed_ns is not None else "still in place"
        rows.append(("Device", _e(f"{p.device_id} from {format_time(p.placed_ns)} to {until}")))
    return "<h2>2. The complaint</h2>" + _table(["", ""], rows)


def _verification(evidence: WindowEvidence) -> str:
    check = evidence.check
    if check.state == VERIFIED:
        return ("<span class='ok'>verifies</span>: the stored window is the linked one, its "
                "content hashes to its digest, and recomputing it now from the stored events "
                "and coverage gives the same content and digest")
    details = "; ".join(check.details)
    return (f"<span class='bad'>the evidence window no longer verifies ({_e(check.state)})"
            f"</span>: {_e(details)}")


def _audibility_counts(f: dict[str, Any]) -> str:
    """Every event of the span in one of three: plainly audible, judged not, not assessed."""
    in_span, audible = int(f.get("events_in_span", 0)), int(f.get("audible_events", 0))
    unknown = int(f.get("audibility_unknown_events", 0))
    return (f"of the {in_span} events in the span, {audible} plainly audible, "
            f"{in_span - audible - unknown} judged not plainly audible and {unknown} not "
            "assessed")


def _coverage(coverage: dict[str, Any]) -> str:
    gaps = coverage.get("gaps_ns", [])
    uncovered = coverage.get("uncovered_s")
    if uncovered is not None and float(uncovered) == 0 and not gaps:
        return "no coverage gaps: every second of the span was measured"
    gap_text = "; ".join(f"{format_time(int(a))} to {format_time(int(b))}" for a, b in gaps)
    return (f"{_num(uncovered, ' s')} of the span not measured"
            + (f" ({len(gaps)} coverage gap(s): {gap_text})" if gap_text else ""))


def _full_scale(evidence: WindowEvidence) -> str:
    return ", ".join(f"{x:g}" for x in evidence.full_scale_db) + " dB SPL"


def _uncalibrated_note(evidence: WindowEvidence) -> str:
    """After a level: what it rests on when no calibration was recorded ("" when one was)."""
    if evidence.calibrated or not evidence.full_scale_db:
        return ""
    default = evidence.full_scale_db == [DEFAULT_FULL_SCALE_DB]
    return (f" (on the {'uncalibrated default ' if default else ''}full scale of "
            f"{_full_scale(evidence)}, no calibration recorded: see Calibration)")


def _calibration(evidence: WindowEvidence, levels: dict[str, Any]) -> str:
    dates = list(evidence.calibration_dates)
    if evidence.calibrated:
        return (f"calibration date {', '.join(dates)}; full scale {_full_scale(evidence)} "
                "(the level a signal at digital full scale reads, from that calibration)")
    if not evidence.full_scale_db:
        return "no level stored around the window: calibration not known"
    not_dates = [d for d in dates if not CALIBRATION_DATE.match(d)]
    stored = "; ".join(
        ([f"calibrated on {', '.join(d for d in dates if d not in not_dates)}"]
         if len(not_dates) < len(dates) else [])
        + ([f"calibration date stored as {', '.join(map(repr, not_dates))}, not a date"]
           if not_dates else [])) or "no calibration date stored"
    seconds = (f" for {evidence.uncalibrated_levels} of the {len(evidence.levels)} seconds "
               "read" if evidence.uncalibrated_levels < len(evidence.levels) else "")
    default = evidence.full_scale_db == [DEFAULT_FULL_SCALE_DB]
    what = ("the uncalibrated default a sensor assumes before its first calibration, not a "
            "measurement of this microphone" if default else
            "not shown by a dated calibration")
    at_100ft = levels.get("level_at_100ft_db_max")
    beyond = ("" if at_100ft is None else
              f", the level 100 ft beyond the boundary (up to {_num(at_100ft, ' dB')}) and the "
              "audibility margins that compare it with the threshold of hearing")
    return (f"no calibration recorded{seconds} ({stored}): full scale "
            f"{_full_scale(evidence)} is {what}, so every absolute level in this report rests "
            f"on it: LAeq {_num(levels.get('laeq_db'), ' dB')} and LAFmax "
            f"{_num(levels.get('lafmax_db'), ' dB')} at the sensor{beyond}")


def element_rows(evidence: WindowEvidence) -> list[tuple[str, str]]:
    """Each element of the violation and its evidence, as (label, escaped HTML) rows (the
    report's section 3 and the review application's finding page)."""
    f = evidence.fields
    link = evidence.check.link
    parameters = f.get("parameters", {})
    continuous = link.rule == "continuous"
    limit = float(parameters.get("continuous_limit_s" if continuous else "intermittent_limit_s",
                                 "nan"))
    gap = float(parameters.get("continuity_gap_s" if continuous else "intermittency_gap_s",
                               "nan"))
    duration = float(f.get("duration_s", "nan"))
    longest_gap = float(f.get("longest_gap_s", "nan"))
    levels, audibility, coverage = f.get("levels", {}), f.get("audibility", {}), \
        f.get("coverage", {})
    labels = sorted({e.label for e in evidence.events})
    uncalibrated = _uncalibrated_note(evidence)
    sensitivity = ", ".join(
        f"gap {float(r['gap_s']):g} s: {'holds' if r['holds'] else 'does not hold'} "
        f"(longest {float(r['longest_s']):.0f} s)" for r in f.get("sensitivity", []))
    return [
        ("Dog noise (barks, whines, howls, bays, cries)",
         _e(f"{f.get('events_counted')} events counted of {f.get('events_in_span')} in the "
            f"span; labels {', '.join(labels) or 'none read'}")),
        ("Duration" + (" (continuously)" if continuous else " (intermittent)"),
         _e(f"{duration:.1f} s ({duration / 60:.1f} min) from "
            f"{format_time(link.start_ns)} to {format_time(link.end_ns)}, against "
            f"more than {limit:.0f} s ({limit / 60:g} min): ")
         + ("<span class='ok'>longer</span>" if duration > limit
            else "<span class='bad'>not longer</span>")),
        ("Continuity", _e(f"longest gap between counted events {longest_gap:.1f} s; the "
                          f"rule's gap: under {gap:g} s")),
        ("Plainly audible at 100 ft",
         _e(f"{_audibility_counts(f)}; level 100 ft beyond the "
            f"boundary up to {_num(levels.get('level_at_100ft_db_max'), ' dB')} (energy mean "
            f"{_num(levels.get('level_at_100ft_db_mean'), ' dB')}){uncalibrated}; audibility "
            "margin "
            f"{_num(audibility.get('margin_db_min'), ' dB')} to "
            f"{_num(audibility.get('margin_db_max'), ' dB')} (median "
            f"{_num(audibility.get('margin_db_median'), ' dB')}); expanded uncertainty "
            f"{_num(f.get('uncertainty_db'), ' dB')}")),
        ("Levels at the sensor", _e(f"LAeq {_num(levels.get('laeq_db'), ' dB')}, LAFmax "
                                    f"{_num(levels.get('lafmax_db'), ' dB')} over counted "
                                    f"events{uncalibrated}")),
        ("Coverage gaps", _e(_coverage(coverage))),
        ("Calibration", _e(_calibration(evidence, levels))),
        ("Classifier and software", _e(f"classifier {', '.join(f.get('model_versions', []))}"
                                       f"; Barkwatch {f.get('software_version', '?')}")),
        ("From the premises' sector (whose dog)", _e(premises_summary(f, link.rule))),
        ("Reading of the rule", _e(f.get("reading", ""))),
        ("Sensitivity to the gap", _e(sensitivity or "not stated")),
        ("Verification now", _verification(evidence)),
    ]


def _elements(data: ReportData) -> str:
    parts = ["<h2>3. Each element of the violation, with its evidence</h2>"]
    if not data.windows:
        parts.append("<p class='bad'>No evidence window is linked to this complaint.</p>")
    for number, evidence in enumerate(data.windows, 1):
        link = evidence.check.link
        parts.append(window_heading(3, number, link, _e))
        if evidence.read_error:
            parts.append(f"<p class='bad'>Stored data could not be read: "
                         f"{_e(evidence.read_error)}</p>")
        if not evidence.fields:
            parts.append(f"<p>{_verification(evidence)}</p>")
            continue
        parts.append(_table(["Element", "Evidence"], element_rows(evidence)))
        polar = bearings_plot(evidence)
        plots = [*window_plots(evidence), *([polar] if polar is not None else [])]
        for letter, (title, caption, uri) in zip("abcde", plots, strict=False):
            parts.append(f"<figure><img alt='{_e(title)}' src='{uri}'><figcaption>"
                         f"<strong>Figure 3.{number}{letter}.</strong> {_e(caption)}"
                         "</figcaption></figure>")
    return "".join(parts)


# Device ids up to 32 characters and "intermittent" need their share; the span is two times.
DIGEST_TABLE_WIDTHS = (22, 17, 39, 22)


def _previous_digest(evidence: WindowEvidence) -> str:
    previous = str(evidence.fields.get("prev_digest", ""))
    # 64 hex digits, kept whole in the HTML (searchable); .mono breaks them anywhere.
    shown = f"<span class='mono'>{escape(previous)}</span>" if previous else "not stored"
    if previous == GENESIS_DIGEST:
        return (f"{shown} (all zeros: the first window of this device's chain, no window "
                "before it)")
    return shown


def _windows(data: ReportData) -> str:
    """One row per window (device, rule, span, check) and under it a full-width row of its
    digests, where 64 hex digits fit on a line and the chain's first window is said so."""
    body = []
    for w in data.windows:
        link = w.check.link
        state = ("<span class='ok'>verifies</span>" if w.check.state == VERIFIED
                 else f"<span class='bad'>{_e(w.check.state)}</span>")
        cells = (_e(link.device_id), _e(link.rule),
                 _e(f"{format_time(link.start_ns)} to {format_time(link.end_ns)}"), state)
        body.append("<tbody><tr>" + "".join(f"<td>{cell}</td>" for cell in cells)
                    + "</tr><tr class='digest'><td colspan='4'>Digest <span class='mono'>"
                    f"{escape(link.digest)}</span><br>Previous digest {_previous_digest(w)}"
                    "</td></tr></tbody>")
    head = "".join(f"<th>{h}</th>" for h in ("Device", "Rule", "Span",
                                              "Recomputed at report time"))
    columns = "".join(f"<col style='width: {w}%'>" for w in DIGEST_TABLE_WIDTHS)
    return ("<h2>4. Evidence windows and their digests</h2><p>Each window is stored in "
            "InfluxDB (measurement <code>evidence_window</code>); its digest is the SHA-256 of "
            "its canonical content, chained to the device's previous window. Recompute with "
            "<code>barkwatch findings recompute <span class='nb'>--device D</span> "
            "<span class='nb'>--from T1</span> <span class='nb'>--to T2</span></code>.</p>"
            f"<div class='wide'><table class='fixed digests'><colgroup>{columns}</colgroup>"
            f"<thead><tr>{head}</tr></thead>{''.join(body)}</table></div>")


def _exceptions(data: ReportData, redact: Redactor) -> str:
    rows = [(_e(x.kind), _e(format_time(x.at_ns)), _e(x.officer), _e(redact(x.notes)))
            for x in data.view.exceptions]
    body = _table(["Exception", "When", "Officer", "Notes"], rows) if rows else \
        "<p>The officer recorded no harassment, injury or trespass.</p>"
    return ("<h2>5. Exceptions as the officer recorded them</h2><p>Subd. 5: not a violation "
            "if the noise was due to harassment or injury to the dog or a trespass.</p>" + body)


def _checklist(data: ReportData, redact: Redactor) -> str:
    rows = []
    for item in data.view.checklist:
        state = "<span class='ok'>met</span>" if item.met else "<span class='bad'>not met</span>"
        detail = "".join(f"<div>+ {_e_digests(redact(x))}</div>" for x in item.evidence) + \
            "".join(f"<div>&minus; missing: {_e(redact(x))}</div>" for x in item.missing)
        rows.append((str(item.number), _e(item.text), _e(item.basis), state, detail))
    return ("<h2>6. Seizure checklist (subd. 5, conditions 1&ndash;7)</h2>"
            + _table(["#", "Condition", "How it is shown", "State", "Evidence / missing"],
                     rows, widths=CHECKLIST_WIDTHS))


# Percent of the table: "#", the condition, how it is shown ("supported", "officer"), the
# state ("not met" on two lines at most), the evidence (digests in .mono wrap anywhere).
CHECKLIST_WIDTHS = (5, 30, 15, 9, 41)


def _officer_records(data: ReportData, redact: Redactor) -> str:
    view = data.view
    contacts = [(_e(format_time(t.at_ns)), _e(t.method), _e(t.outcome.replace("_", " ")),
                 _e(t.officer), _e(redact(t.notes))) for t in view.contacts]
    observations = [(_e(format_time(o.at_ns)), _e(o.officer), _e(redact(o.notes)))
                    for o in view.observations]
    dispositions = [(_e(d.kind), _e(format_time(d.at_ns)), _e(d.officer),
                     _e(f"{d.prior_citations} earlier citation(s) at the address"
                        + (" (first violation: petty misdemeanor, subd. 5)"
                           if d.kind == "citation" and d.prior_citations == 0 else "")),
                     _e(redact(d.notes))) for d in view.dispositions]
    return ("<h2>7. Contact attempts, observations and dispositions</h2>"
            + (_table(["When", "Method", "Outcome", "Officer", "Notes"], contacts)
               if contacts else "<p>No contact attempt recorded.</p>")
            + (_table(["When", "Officer", "Observation"], observations)
               if observations else "<p>No observation recorded.</p>")
            + (_table(["Disposition", "When", "Officer", "Prior violations", "Notes"],
                      dispositions) if dispositions else "<p>No disposition recorded.</p>")
            + f"<p>Citations at this address before this complaint: {view.prior_citations}."
              "</p>")


def _history(data: ReportData, redact: Redactor) -> str:
    rows = [(f"#{c.id}" + (" (this complaint)" if c.id == data.view.complaint.id else ""),
             _e(format_time(c.received_ns)),
             _e(f"{format_time(c.span_start_ns)} to {format_time(c.span_end_ns)}"),
             _e(redact(c.complainant_name)), _e(c.officer))
            for c in data.view.history]
    return ("<h2>8. Complaint history at the address</h2>"
            + _table(["Complaint", "Received", "Barking complained about", "Complainant",
                      "Officer"], rows))


def render_html(data: ReportData, paper: str = DEFAULT_PAPER) -> str:
    """The whole report as one HTML document, printed on ``paper`` (a key of
    :data:`analyzer.reports.paper.PAPER_SIZES`)."""
    view = data.view
    redact = Redactor(view.history, data.redacted)
    notice = ("<div class='notice'>Redacted export: the complainant's identity is withheld."
              "</div>" if data.redacted else
              "<div class='notice'><strong>Contains personal data</strong>: the complainant's "
              "name and contact (sections 2, 6 and 8). Share outside the case only as a "
              "redacted export (<code class='nb'>barkwatch case export --redact</code>).</div>")
    verified = sum(w.check.state == VERIFIED for w in data.windows)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>Barkwatch evidence report, complaint #{view.complaint.id}</title>"
        f"<style>{page_css(paper)}{CSS}</style></head><body>"
        f"<h1>Barking-dog evidence report &mdash; complaint #{view.complaint.id}</h1>"
        f"<p>{_e(view.address.premises)}. Generated {_e(format_time(data.generated_ns))} by "
        f"Barkwatch {_e(data.software_version)}. Times are America/Chicago with UTC beside "
        f"them. {verified} of {len(data.windows)} linked evidence window(s) verify now.</p>"
        + notice + _ordinance() + _complaint(data, redact) + _elements(data)
        + _windows(data) + _exceptions(data, redact) + _checklist(data, redact)
        + _officer_records(data, redact) + _history(data, redact)
        + verdicts_section(data, redact, _e, _table)
        + "<p><em>Barkwatch states the measurements and how they were read; whether the "
          "ordinance was violated is for the officer and the court.</em></p></body></html>")
