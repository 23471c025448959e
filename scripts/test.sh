#!/usr/bin/env bash
# The whole test suite, with its set-up: system packages, .venv, lint, type check, pytest.
# Tests start their own Mosquitto and InfluxDB; a missing one fails the run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh dev
echo "== ruff"
.venv/bin/ruff check sensor analyzer training tests scripts benchmarks dashboards
echo "== mypy"
.venv/bin/mypy sensor analyzer training dashboards/generate.py
echo "== pytest"
.venv/bin/pytest "$@"
