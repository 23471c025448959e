"""What a built wheel holds: every package and subpackage of the three top-level packages
(a plain list of the top-level names once left analyzer.cli and the rest out), and the review
application's templates and static files as package data."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def test_setuptools_finds_every_package_with_python_files() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set(find_packages(str(ROOT), include=config["packages"]["find"]["include"],
                              exclude=config["packages"]["find"]["exclude"]))
    expected = {str(init.parent.relative_to(ROOT)).replace("/", ".")
                for top in ("sensor", "analyzer", "training")
                for init in (ROOT / top).rglob("__init__.py")}
    assert found == expected
    assert {"analyzer.cli", "analyzer.ingest", "analyzer.review"} <= found


def test_the_review_templates_and_static_files_are_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = config["package-data"]["analyzer"]
    shipped = {p for pattern in patterns for p in (ROOT / "analyzer").glob(pattern)}
    for folder in ("review/templates", "review/static"):
        files = [f for f in (ROOT / "analyzer" / folder).iterdir() if f.is_file()]
        assert files and set(files) <= shipped, folder
