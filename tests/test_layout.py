"""The layout's import contracts ([tool.importlinter] in pyproject.toml, README "Code map"):
layers from the commands down to the pure cores, no I/O in the cores, no import circles."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PARTS = ("acoustics", "cases", "cli", "deploy", "detect", "ingest", "offline", "ordinance",
         "reports", "review", "store")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter with the project's contracts over the packages in ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")]
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300)


def copy_of_the_packages(tmp_path: Path) -> Path:
    for name in ("analyzer", "sensor", "training"):
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_project_keeps_every_import_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "added_import", "contract"),
    [
        ("analyzer/detect/events.py", "import analyzer.store.influx", "layered"),
        ("analyzer/ordinance/rules.py", "import paho.mqtt.client", "Pure cores do no I/O"),
        ("analyzer/acoustics/propagation.py", "import analyzer.acoustics.site",
         "No import circles"),
    ],
)
def test_an_upward_import_or_a_circle_breaks_a_contract(
    tmp_path: Path, module: str, added_import: str, contract: str
) -> None:
    tree = copy_of_the_packages(tmp_path)
    path = tree / module
    path.write_text(path.read_text() + f"\n{added_import}  # the violation under test\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout


def test_each_part_says_what_it_owns_in_one_line() -> None:
    for part in PARTS:
        init = ROOT / "analyzer" / part / "__init__.py"
        docstring = init.read_text().split('"""')[1]
        assert docstring.strip() and "\n" not in docstring.strip(), part
