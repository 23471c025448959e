"""The report's paper: ``[report] paper`` in the review application's configuration and
``--paper`` of ``barkwatch report`` / ``case export``. US Letter by default (Glencoe is in
Minnesota); A4 for a city that files on it."""

from __future__ import annotations

from dataclasses import dataclass

from sensor.configfile import setting
from sensor.errors import ConfigError

# The key's values and the CSS @page size each stands for (CSS Paged Media, "page-size").
PAPER_SIZES = {"letter": "letter", "a4": "A4"}
DEFAULT_PAPER = "letter"
# Page margins: 0.6 in either side leave 7.3 in of Letter (6.9 in of A4) for the tables.
PAGE_MARGIN = "16mm 15mm"


@dataclass(frozen=True)
class ReportSettings:
    """How the evidence report is printed."""

    paper: str = setting(DEFAULT_PAPER, "paper size of the evidence report's PDF: \"letter\" "
                         "(US Letter, 8.5 x 11 in) or \"a4\" (210 x 297 mm)",
                         choices=tuple(PAPER_SIZES))

    def __post_init__(self) -> None:
        check_paper(self.paper)


def check_paper(paper: str, key: str = "report.paper") -> str:
    """``paper`` if it is one of :data:`PAPER_SIZES`; ConfigError naming ``key`` if not."""
    if paper not in PAPER_SIZES:
        raise ConfigError(f"config key {key!r}: {str(paper)[:40]!r} is not a paper size the "
                          f"report is made on; one of {', '.join(map(repr, PAPER_SIZES))}")
    return paper


def page_css(paper: str) -> str:
    """The CSS @page rule of ``paper`` (what WeasyPrint and a browser's print follow)."""
    return f"@page {{ size: {PAPER_SIZES[check_paper(paper)]}; margin: {PAGE_MARGIN}; }}"
