"""The report's tables lay out long text at a cost that grows with its length, not its square
(issue 33: ``overflow-wrap: anywhere`` made a 4,000-character note 31 s of WeasyPrint), no
cell is wider than the page, and a record's notes are bounded where they are entered."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from analyzer.cases import CaseError, CaseFile
from analyzer.cases.store import MAX_NOTE_CHARS
from analyzer.reports.html import CSS, LONGEST_UNBROKEN, _e, _table

PROSE = "the dog at the back fence barked again while the officer waited at the gate "


def pdf_words(pdf: Path) -> tuple[float, list[tuple[float, str]]]:
    """(page width, [(right edge, word)]) from pdftotext's bounding boxes, in points."""
    boxes = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True,
                           text=True, check=True, timeout=60).stdout
    width = float(re.search(r'<page width="([\d.]+)"', boxes).group(1))  # type: ignore[union-attr]
    words = [(float(x), w) for x, w in re.findall(r'xMax="([\d.]+)"[^>]*>([^<]*)</word>', boxes)]
    return width, words


def render(cells: list[str], path: Path) -> Path:
    import weasyprint

    document = (f"<html><head><style>{CSS}</style></head><body>"
                + _table(["When", "Officer", "Notes"],
                         [["2026-06-01 20:00", "Ofc. Lund", _e(c)] for c in cells])
                + "</body></html>")
    weasyprint.HTML(string=document).write_pdf(path)
    return path


def test_table_cells_no_longer_break_anywhere() -> None:
    # 'anywhere' counts every character as a break opportunity in the min-content width,
    # which is what made WeasyPrint's table layout quadratic in a cell's length.
    assert "anywhere" not in CSS
    assert "overflow-wrap: break-word" in CSS and "word-break: normal" in CSS


def test_a_long_run_without_spaces_may_break_but_words_are_kept_whole() -> None:
    run = "x" * (3 * LONGEST_UNBROKEN + 1)
    assert _e(run).split("<wbr>") == ["x" * LONGEST_UNBROKEN] * 3 + ["x"]
    assert _e(PROSE) == PROSE.replace("'", "&#x27;")  # no break inside ordinary words
    assert _e("<" * 40) == "&lt;" * 30 + "<wbr>" + "&lt;" * 10  # escaped after cutting


def test_a_note_at_the_bound_and_a_long_token_render_whole_inside_the_page(
        tmp_path: Path) -> None:
    note = (PROSE * (MAX_NOTE_CHARS // len(PROSE) + 1))[:MAX_NOTE_CHARS]
    token = "".join(f"{i:05d}" for i in range(600))  # 3,000 characters, no space
    width, words = pdf_words(render([note, token], tmp_path / "long.pdf"))
    text = "".join(w for _, w in words)
    assert note.replace(" ", "") in text and token in text
    assert max(x for x, _ in words) < width  # nothing runs off the page's right edge


def test_a_note_longer_than_the_bound_is_refused_naming_the_bound(tmp_path: Path) -> None:
    with CaseFile(tmp_path / "cases.sqlite") as store:
        address = store.add_address("12 Elm St", "Ofc. Lund")
        complaint = store.open_complaint(address, "Ann", "555", 10**18, 10**18, 10**18 + 1,
                                         True, "Ofc. Lund")
        store.add_observation(complaint, 10**18, "Ofc. Lund", "x" * MAX_NOTE_CHARS)
        with pytest.raises(CaseError, match=f"observation has {MAX_NOTE_CHARS + 1:,} "
                                            f"characters; at most {MAX_NOTE_CHARS:,}"):
            store.add_observation(complaint, 10**18, "Ofc. Lund", "x" * (MAX_NOTE_CHARS + 1))
        with pytest.raises(CaseError, match="notes has 100,000 characters"):
            store.add_contact_attempt(complaint, 10**18, "door", "no_answer", "Ofc. Lund",
                                      "y" * 100_000)
        assert len(store.observations(complaint)) == 1
