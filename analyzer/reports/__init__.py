"""The officer's evidence report: one self-contained HTML file and a PDF of the same content."""

from __future__ import annotations

from analyzer.reports.gather import ReportData, WindowEvidence, gather
from analyzer.reports.html import element_rows, render_html
from analyzer.reports.plots import PLOT_TITLES
from analyzer.reports.writer import ReportError, write_report

__all__ = ["PLOT_TITLES", "ReportData", "ReportError", "WindowEvidence", "element_rows",
           "gather", "render_html", "write_report"]
