#!/usr/bin/env bash
# The main job on a fresh machine: set up, then run the demo (local Mosquitto and InfluxDB; a
# scene of more than 7 minutes of barking made from the bundled recording, replayed through
# sensor -> broker -> analyzer -> database; then a complaint, its verified finding and the
# evidence report, HTML and PDF, written into ./barkwatch-demo-report or --out DIR).
# The demo's broker accepts anonymous clients on loopback, for convenience only (the demo says
# so when it starts); a deployment uses broker_config/, which refuses them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh analyzer
# exec: Ctrl-C and SIGTERM reach the demo itself, which stops its services and cleans up.
exec .venv/bin/barkwatch demo "$@"
