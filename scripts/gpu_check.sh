#!/usr/bin/env bash
# GPU checks for libtidewire on a machine with an NVIDIA GPU and PyTorch: builds the release
# library, then (scripts/gpu_check.py) moves GPU<->GPU, GPU->host and host->GPU over loopback
# TCP between two engines, verifies every byte, runs the stream-ordered path, puts and gets
# Store values from and into device memory (a tidewire-master and two store clients), and prints
# bandwidth for 1 MiB and 64 MiB blocks. Exit 0 only if every check passes. Bounded: about
# 8 minutes at most (build 5, checks 3).
#
#   scripts/gpu_check.sh          real GPU (PyTorch allocates device memory)
#   scripts/gpu_check.sh --fake   no GPU: the fake driver from tests/fake_cuda (TW_CUDA_LIB)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=real
case "${1:-}" in
  --fake) mode=fake ;;
  "") ;;
  *) echo "usage: $0 [--fake]" >&2; exit 2 ;;
esac

PY=${PYTHON:-python3}
step() { echo "== $*"; }
die() { echo "gpu_check: $*" >&2; exit 1; }

command -v cargo >/dev/null || die "cargo not found"
command -v "$PY" >/dev/null || die "$PY not found"
command -v timeout >/dev/null || die "timeout (coreutils) not found"

step "build (cargo build --release --workspace, at most 300 s)"
timeout 300 cargo build --release --workspace || die "build failed or timed out"
lib=target/release/libtidewire.so
[ -f "$lib" ] || die "$lib missing after the build"
if readelf -d "$lib" 2>/dev/null | grep -Eq 'NEEDED.*(libcuda|libcudart)'; then
  die "$lib links a CUDA library at build time"
fi

if [ "$mode" = fake ]; then
  step "build the fake CUDA driver"
  mkdir -p target/fake_cuda
  ${CC:-gcc} -std=c11 -O1 -shared -fPIC -pthread -o target/fake_cuda/libcuda.so.1 \
    tests/fake_cuda/fake_cuda.c || die "cannot build the fake driver"
  export TW_CUDA_LIB=$PWD/target/fake_cuda/libcuda.so.1
  args=(--fake)
else
  step "environment"
  if command -v nvidia-smi >/dev/null; then
    timeout 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv \
      || echo "(nvidia-smi failed; continuing)"
  fi
  timeout 120 "$PY" -c 'import torch, sys; ok = torch.cuda.is_available(); print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count() if ok else 0); sys.exit(0 if ok else 1)' \
    || die "PyTorch with CUDA is required (and a visible GPU)"
  args=()
fi

step "checks (at most 180 s)"
timeout -k 10 180 "$PY" scripts/gpu_check.py --lib "$lib" "${args[@]}" \
  || die "GPU checks failed (or timed out)"
echo "gpu_check: all checks passed ($mode)"
