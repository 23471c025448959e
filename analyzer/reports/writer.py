"""Write the report: ``report.html`` (self-contained) and ``report.pdf`` (WeasyPrint renders
the same HTML, so both carry the same content)."""

from __future__ import annotations

import logging
from pathlib import Path

from analyzer.errors import AnalyzerError
from analyzer.files import write_file
from analyzer.reports.gather import ReportData
from analyzer.reports.html import render_html
from analyzer.reports.paper import DEFAULT_PAPER

log = logging.getLogger(__name__)


class ReportError(AnalyzerError):
    """The report cannot be written (folder, PDF engine)."""


def write_report(data: ReportData, out_dir: str | Path,
                 paper: str = DEFAULT_PAPER) -> tuple[Path, Path]:
    """Write the HTML and the PDF, on ``paper`` ("letter" or "a4"), into ``out_dir``
    (created); returns their paths. Both are created readable by the owner only when they
    carry personal data (not redacted)."""
    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportError(f"cannot create report folder {folder}: {exc}") from exc
    stem = f"complaint-{data.view.complaint.id}" + ("-redacted" if data.redacted else "")
    html_path, pdf_path = folder / f"{stem}.html", folder / f"{stem}.pdf"
    document = render_html(data, paper)
    mode = 0o644 if data.redacted else 0o600
    try:
        import weasyprint  # heavy import: only when a report is written
    except ImportError as exc:
        raise ReportError("the PDF needs WeasyPrint: pip install 'barkwatch[analyzer]' "
                          f"(and Debian's libpango-1.0-0): {exc}") from exc
    pdf = weasyprint.HTML(string=document, base_url=str(folder)).write_pdf()
    try:
        write_file(html_path, document.encode("utf-8"), mode)
        write_file(pdf_path, pdf, mode)
    except OSError as exc:
        raise ReportError(f"cannot write the report into {folder}: {exc}") from exc
    log.info("report written: %s, %s", html_path, pdf_path)
    return html_path, pdf_path
