#!/usr/bin/env bash
# Creates .venv-tq: TransferQueue (PyPI `transferqueue`) and its dependencies (torch, ray,
# tensordict, ...), for python/tests/test_tq_client.py, which runs TransferQueue's own
# MooncakeStore client on tidewire. Large: torch from PyPI brings its CUDA wheels (several GiB).
#
#   scripts/setup_tq_venv.sh [PYTHON]     # default python3; TQ_VERSION overrides the version
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-python3}"
VERSION="${TQ_VERSION:-0.1.11}"
start=$(date +%s)
[ -x .venv-tq/bin/python ] || "$PY" -m venv .venv-tq
.venv-tq/bin/pip install --quiet "transferqueue==${VERSION}" pytest
.venv-tq/bin/python -c "import torch, transfer_queue.storage.clients.mooncake_client as m; \
print('transferqueue', m.__file__, 'torch', torch.__version__)"
echo "setup_tq_venv: done in $(( $(date +%s) - start )) s"
