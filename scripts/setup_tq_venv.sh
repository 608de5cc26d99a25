#!/usr/bin/env bash
# Creates .venv-tq: TransferQueue (PyPI `transferqueue`) and its dependencies (torch, ray,
# tensordict, ...), for python/tests/test_tq_client.py, which runs TransferQueue's own
# MooncakeStore client on tidewire. Large: torch from PyPI brings its CUDA wheels (several GiB).
#
#   scripts/setup_tq_venv.sh [PYTHON]     # default python3; TQ_VERSION overrides the version
#
# The environment is built under .venv-tq.partial and renamed when complete, so a test that
# looks for .venv-tq meanwhile never finds a half-installed one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-python3}"
VERSION="${TQ_VERSION:-0.1.11}"
PROBE="import torch, transfer_queue.storage.clients.mooncake_client as m; \
print('transferqueue', m.__file__, 'torch', torch.__version__)"
start=$(date +%s)
if [ -x .venv-tq/bin/python ] && .venv-tq/bin/python -c "$PROBE" 2>/dev/null; then
    echo "setup_tq_venv: .venv-tq is ready"
    exit 0
fi
rm -rf .venv-tq.partial
"$PY" -m venv .venv-tq.partial
.venv-tq.partial/bin/python -m pip install --quiet --disable-pip-version-check \
    "transferqueue==${VERSION}" pytest
.venv-tq.partial/bin/python -c "$PROBE"
rm -rf .venv-tq
mv .venv-tq.partial .venv-tq
.venv-tq/bin/python -c "import transfer_queue" \
    || { echo "setup_tq_venv: the environment does not work after renaming" >&2; exit 1; }
echo "setup_tq_venv: done in $(( $(date +%s) - start )) s"
