#!/usr/bin/env bash
# Side-by-side loopback benchmark: Mooncake Transfer Engine (PyPI wheel) and tidewire, the same
# workload (bench/compare.py) in the same run, engines alternating, then one table.
#
#   make build && bench/run.sh                                   # full run (~15 min on 2 cores)
#   QUICK=1 bench/run.sh                                         # smoke run (~2 min)
#   TW_SAME_HOST=0 MODE=two-process GRID=1 bench/run.sh          # the engine grid, TCP only
#   BLOCKS=65536,262144 BATCHES=1,8 SECTIONS=tput bench/run.sh   # chosen points
#   TARGET_ENGINE=mooncake ENGINES=tidewire bench/run.sh         # interop: tidewire -> Mooncake
#
# Environment (defaults in brackets):
#   MODE           same-process | two-process: the target engine in this process or its own
#                  [same-process]
#   ENGINES        initiating engines, run in this order each round ["mooncake tidewire"]
#   TARGET_ENGINE  engine holding the remote buffer [each initiator's own]
#   RUNS           rounds over ENGINES [2]
#   SECTIONS       any of tput,lat,scatter [lat,tput,scatter]
#   GRID=1         block sizes 4 KiB..16 MiB (x4 steps) x batches 1,4,32
#   BLOCKS, BATCHES, SCATTER_N   comma lists; override GRID and QUICK
#   QUICK=1        fewer, shorter points
#   LIMITS=0       skip the physical-limits probe [1]
#   TW_SAME_HOST=0 tidewire sends every byte over TCP (no same-host shortcut); read by tidewire
#   OUTDIR         results folder [target/bench/results/<UTC time>]
#   VENV           Python with the Mooncake wheel [.venv-mooncake]; WHEEL_SPEC: the wheel to install
#   SKIP_SETUP=1   do not create or check VENV
#   TIDEWIRE_LIB   the library [target/release/libtidewire.so]
#
# Everything runs inside `unshare -n` (a private network namespace with only "lo"), because
# Mooncake's listeners bind all addresses in P2P mode; every address used is 127.0.0.1. The
# only processes stopped are the ones this run started.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROJECT=${PROJECT:-$(dirname "$HERE")}
VENV=${VENV:-$PROJECT/.venv-mooncake}
WHEEL_SPEC=${WHEEL_SPEC:-mooncake-transfer-engine-non-cuda==0.3.13.post1}
MODE=${MODE:-same-process}
ENGINES=${ENGINES:-"mooncake tidewire"}
TARGET_ENGINE=${TARGET_ENGINE:-}
RUNS=${RUNS:-2}
SECTIONS=${SECTIONS:-lat,tput,scatter}
QUICK=${QUICK:-0}
GRID=${GRID:-0}
LIMITS=${LIMITS:-1}
OUTDIR=${OUTDIR:-$PROJECT/target/bench/results/$(date -u +%Y%m%dT%H%M%SZ)}
TIDEWIRE_LIB=${TIDEWIRE_LIB:-$PROJECT/target/release/libtidewire.so}
export PROJECT VENV WHEEL_SPEC MODE ENGINES TARGET_ENGINE RUNS SECTIONS QUICK GRID LIMITS OUTDIR
export TIDEWIRE_LIB

if [ "${1:-}" != "--in-namespace" ]; then
    export PYTHONPATH=$PROJECT/python${PYTHONPATH:+:$PYTHONPATH}
    case " $ENGINES $TARGET_ENGINE " in
        *" tidewire "*)
            if [ ! -f "$TIDEWIRE_LIB" ]; then
                echo "run.sh: $TIDEWIRE_LIB is missing (make build)" >&2
                exit 1
            fi ;;
    esac
    if [ "$LIMITS" = 1 ] && ! command -v gcc >/dev/null; then
        echo "run.sh: gcc is needed for the physical-limits probe (or set LIMITS=0)" >&2
        exit 1
    fi
    if [ "${SKIP_SETUP:-0}" != 1 ]; then
        MOONCAKE_VENV=$VENV MOONCAKE_WHEEL_SPEC=$WHEEL_SPEC \
            "$PROJECT/scripts/setup_mooncake_venv.sh" >/dev/null
    fi
    mkdir -p "$OUTDIR"
    {
        echo "date_utc: $(date -u +%FT%TZ)"
        uname -a
        echo "nproc: $(nproc)"
        echo "project: $(git -C "$PROJECT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
        echo "loadavg: $(cat /proc/loadavg)"
        env | grep -E '^(TW_|MC_)' | sort || true
    } > "$OUTDIR/env.txt"
    cat "$OUTDIR/env.txt"
    exec unshare -n bash "$HERE/run.sh" --in-namespace
fi

ip link set lo up
PY=$VENV/bin/python
ARGS=(--reps 3)
PHYS=(--reps 2)
if [ "$QUICK" = 1 ]; then
    ARGS=(--reps 2 --rep-seconds 0.3 --lat-seconds 0.3 --scatter-rep-seconds 0.3
          --blocks 4096,1048576,16777216 --batches 32 --scatter-n 1,4096)
    PHYS=(--reps 1 --stream-seconds 2 --pingpong-seconds 1)
fi
if [ "$GRID" = 1 ]; then
    ARGS+=(--blocks 4096,16384,65536,262144,1048576,4194304,16777216 --batches 1,4,32)
fi
[ -z "${BLOCKS:-}" ] || ARGS+=(--blocks "$BLOCKS")
[ -z "${BATCHES:-}" ] || ARGS+=(--batches "$BATCHES")
[ -z "${SCATTER_N:-}" ] || ARGS+=(--scatter-n "$SCATTER_N")

if [ "$LIMITS" = 1 ]; then
    "$PY" "$HERE/limits/physical_limits.py" "${PHYS[@]}" --bindir "$PROJECT/target/bench/limits" \
        --out "$OUTDIR/phys.json" | tee "$OUTDIR/phys.txt"
fi

# Mooncake refuses batches deeper than its per-peer queue (1024) unless it is raised; the
# scatter section sends up to 32768 requests in one batch.
export MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER=${MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER:-65535}
failed=0
for run in $(seq 1 "$RUNS"); do
    for eng in $ENGINES; do
        name=${eng}_run$run
        echo "=== run $run/$RUNS engine=$eng target=${TARGET_ENGINE:-$eng} $(date -u +%T)"
        if ! timeout 1800 "$PY" "$HERE/compare.py" --engine "$eng" \
                ${TARGET_ENGINE:+--target-engine "$TARGET_ENGINE"} --mode "$MODE" \
                --sections "$SECTIONS" "${ARGS[@]}" --label "$name" --out "$OUTDIR/$name.json" \
                --target-log "$OUTDIR/$name.target.stderr" \
                2> "$OUTDIR/$name.stderr" | tee "$OUTDIR/$name.txt"; then
            echo "engine $eng run $run FAILED (see $OUTDIR/$name.stderr)"
            failed=1
        fi
    done
done
"$PY" "$HERE/table.py" "$OUTDIR" | tee "$OUTDIR/summary.md"
exit "$failed"
