#!/usr/bin/env bash
# Prepare the real Mooncake Transfer Engine (Python wheel) as an interop peer.
#
#   scripts/setup_mooncake_venv.sh
#
# Idempotent. Installs Debian's libibverbs1 when missing (the wheel's engine.so
# links against libibverbs.so.1 even for TCP), creates a venv at
# ${MOONCAKE_VENV:-.venv-mooncake} (relative to the repo root unless absolute),
# installs ${MOONCAKE_WHEEL_SPEC:-mooncake-transfer-engine-non-cuda==0.3.13.post1}
# plus pytest and numpy (one test passes numpy arrays) and pyzmq and msgpack (the KV-event
# subscriber of test_master_kv_events.py), checks that `from mooncake.engine import TransferEngine` works,
# and prints the venv's python path as the last stdout line.
#
# Environment: MOONCAKE_VENV, MOONCAKE_WHEEL_SPEC, PYTHON (default python3).
set -euo pipefail

die() { echo "setup_mooncake_venv: error: $*" >&2; exit 1; }
log() { echo "setup_mooncake_venv: $*" >&2; }

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MOONCAKE_VENV:-.venv-mooncake}"
case "$VENV" in /*) ;; *) VENV="$REPO_ROOT/$VENV" ;; esac
SPEC="${MOONCAKE_WHEEL_SPEC:-mooncake-transfer-engine-non-cuda==0.3.13.post1}"
PYTHON="${PYTHON:-python3}"

# 1. libibverbs.so.1 -------------------------------------------------------------
have_ibverbs() { ldconfig -p 2>/dev/null | grep -q 'libibverbs\.so\.1'; }
if ! have_ibverbs; then
    command -v apt-get >/dev/null 2>&1 \
        || die "libibverbs.so.1 is missing and apt-get is not available; install libibverbs1"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "libibverbs.so.1 missing; need root (or sudo) to apt-get install libibverbs1"
        SUDO="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    log "installing libibverbs1"
    if ! $SUDO apt-get install -y -q libibverbs1 >&2; then
        log "apt-get install failed; running apt-get update and retrying"
        $SUDO apt-get update -q >&2 || die "apt-get update failed"
        $SUDO apt-get install -y -q libibverbs1 >&2 || die "apt-get install libibverbs1 failed"
    fi
    have_ibverbs || die "libibverbs1 installed but libibverbs.so.1 is not in the ldconfig cache"
fi

# 2. venv ------------------------------------------------------------------------
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    :
else
    log "creating venv at $VENV"
    "$PYTHON" -m venv --clear "$VENV" >&2 \
        || die "'$PYTHON -m venv $VENV' failed (on Debian: apt-get install python3-venv)"
fi
VPY="$VENV/bin/python"

# 3. wheel + pytest ---------------------------------------------------------------
check_import() {
    "$VPY" -c 'from mooncake.engine import TransferEngine' >/dev/null 2>&1
}
if check_import && "$VPY" -m pip install --dry-run --no-deps --no-index -q "$SPEC" pytest numpy pyzmq msgpack >/dev/null 2>&1; then
    log "mooncake ($SPEC) and pytest already installed"
else
    log "pip installing $SPEC pytest numpy pyzmq msgpack"
    "$VPY" -m pip install -q --disable-pip-version-check "$SPEC" pytest numpy pyzmq msgpack >&2 \
        || die "pip install '$SPEC' pytest failed"
fi
check_import || {
    "$VPY" -c 'from mooncake.engine import TransferEngine' >&2 || true
    die "'from mooncake.engine import TransferEngine' fails in $VENV"
}

echo "$VPY"
