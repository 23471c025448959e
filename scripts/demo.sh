#!/usr/bin/env bash
# The main job on a fresh machine: set up, then run the demo (local Mosquitto and InfluxDB,
# the bundled recording replayed through sensor -> broker -> analyzer -> database).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh analyzer
.venv/bin/barkwatch demo "$@"
