#!/usr/bin/env bash
# Does the sensor install and pass its tests on arm64 Debian bookworm, the base of 64-bit
# Raspberry Pi OS? Builds an arm64 root file system with debootstrap, copies the working tree
# into it, runs `scripts/bootstrap.sh sensor` and the sensor's tests there under qemu
# user-mode emulation, then a one-minute bench_sensor.py run for an emulated real-time factor
# (a sanity figure only: emulation is many times slower than a Pi). Slow (an hour or more on
# 2 cores), so CI does not run it. Needs root and the Debian mirror and PyPI.
#
#   scripts/check-arm64.sh [ROOTFS]      # default /var/tmp/barkwatch-arm64; reused if there
#
# With binfmt_misc (mounted here if it is not) every arm64 process, apt's and pip's children
# included, runs under qemu-aarch64-static in a chroot. Without it only the interpreter can
# be emulated: the script then says so and runs the tests with
# `qemu-aarch64-static -L ROOTFS ROOTFS/usr/bin/python3.11`, after unpacking the Debian
# packages with debootstrap --foreign and installing the wheels from here with pip's
# --platform option.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rootfs="${1:-/var/tmp/barkwatch-arm64}"
mirror="${MIRROR:-http://deb.debian.org/debian}"
suite=bookworm
# The sensor's tests that need neither the analyzer, the broker nor the database (run with
# --noconftest: tests/conftest.py imports the analyzer, and so do test_frames.py and
# test_calibration.py through its helpers, so they cannot run with the sensor extra alone).
sensor_tests=(tests/test_levels.py tests/test_weighting_accuracy.py tests/test_kernels.py
  tests/test_bands.py tests/test_outbox.py)
debs=python3,python3-venv,python3-pip,ca-certificates,libportaudio2,libsndfile1
log() { echo "check-arm64: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then echo "check-arm64: run as root (debootstrap, chroot)" >&2; exit 2; fi
for tool in debootstrap qemu-aarch64-static; do
  if ! command -v "$tool" >/dev/null; then
    log "installing debootstrap and qemu-user-static"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      debootstrap qemu-user-static
    break
  fi
done

binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/register" ]; then
  mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null || true
fi
if [ -e "$binfmt/register" ] && [ ! -e "$binfmt/qemu-aarch64" ]; then
  # Debian's registration, with F (the interpreter opened now, so it works inside a chroot).
  conf=/usr/lib/binfmt.d/qemu-aarch64.conf
  if [ -f "$conf" ]; then grep -v '^#' "$conf" > "$binfmt/register" 2>/dev/null || true; fi
fi
emulated_chroot=false
if [ -e "$binfmt/qemu-aarch64" ] && grep -q enabled "$binfmt/qemu-aarch64"; then
  emulated_chroot=true
fi

if [ ! -x "$rootfs/usr/bin/python3.11" ]; then
  log "debootstrap arm64 $suite into $rootfs (chroot emulation: $emulated_chroot)"
  if $emulated_chroot; then
    debootstrap --arch=arm64 --variant=minbase --include="$debs" "$suite" "$rootfs" "$mirror"
  else
    debootstrap --foreign --arch=arm64 --variant=minbase --include="$debs" \
      "$suite" "$rootfs" "$mirror"
    # Without binfmt the second stage cannot run; unpack every downloaded package instead.
    for deb in "$rootfs"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$rootfs"; done
  fi
fi

log "copying the working tree (tracked and untracked, not ignored) to $rootfs/opt/barkwatch"
rm -rf "$rootfs/opt/barkwatch"
mkdir -p "$rootfs/opt/barkwatch"
(cd "$root" && git ls-files -z --cached --others --exclude-standard \
  | xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' \
  | tar --null -T - -cf -) | tar -xf - -C "$rootfs/opt/barkwatch"
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
# Trust what the host trusts: a locally added CA (an HTTPS proxy's, for instance) is what
# lets pip reach PyPI from here.
local_cas=(/usr/local/share/ca-certificates/*.crt)
if [ -e "${local_cas[0]}" ]; then
  mkdir -p "$rootfs/usr/local/share/ca-certificates"
  cp "${local_cas[@]}" "$rootfs/usr/local/share/ca-certificates/"
  if $emulated_chroot; then
    chroot "$rootfs" /usr/sbin/update-ca-certificates >/dev/null
  else
    cat "${local_cas[@]}" >> "$rootfs/etc/ssl/certs/ca-certificates.crt"
  fi
fi
[ -f /etc/pip.conf ] && grep -v -E 'find-links|extra-index-url' /etc/pip.conf \
  > "$rootfs/etc/pip.conf" || true

run_tests='cd /opt/barkwatch
.venv/bin/python -m pip install -q "pytest>=8" "pytest-timeout>=2.2" hypothesis
echo "arm64: $(uname -m), $(.venv/bin/python --version)"
.venv/bin/python -m pytest --noconftest -q -p no:cacheprovider '"${sensor_tests[*]}"'
status=$?
.venv/bin/python benchmarks/bench_sensor.py --rate 48000 --minutes 1
exit $status'

if $emulated_chroot; then
  log "chroot $rootfs: scripts/bootstrap.sh sensor, then the sensor tests (every process emulated)"
  mount -t proc proc "$rootfs/proc"
  trap 'umount "$rootfs/proc" 2>/dev/null || true' EXIT
  chroot "$rootfs" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    NUMBA_CACHE_DIR=/tmp/numba bash -c "cd /opt/barkwatch && scripts/bootstrap.sh sensor && $run_tests"
else
  log "no binfmt_misc: running only the interpreter, as qemu-aarch64-static -L $rootfs" \
    "$rootfs/usr/bin/python3.11; bootstrap.sh's apt step is replaced by the unpacked packages"
  site="$rootfs/opt/barkwatch/.arm64-site"
  python3 -m pip install -q --only-binary=:all: --platform manylinux2014_aarch64 \
    --platform manylinux_2_28_aarch64 --python-version 3.11 --target "$site" \
    sounddevice soundfile librosa "paho-mqtt>=2,<3" tomlkit onnxruntime \
    "pytest>=8" "pytest-timeout>=2.2" hypothesis
  cd "$rootfs/opt/barkwatch"
  PYTHONPATH="$site:." NUMBA_CACHE_DIR=/tmp/numba-arm64 qemu-aarch64-static -L "$rootfs" \
    "$rootfs/usr/bin/python3.11" -m pytest --noconftest -q -p no:cacheprovider "${sensor_tests[@]}"
fi
