#!/usr/bin/env bash
# Creates .venv-serving: the serving stacks whose own Store clients `make serving-test` drives
# (SGLang's HiCache backend, vLLM's MooncakeStoreConnector, LMCache's mooncakestore://) and
# whose P/D connectors `make pd-test` drives, and the Mooncake wheel as the control. It reuses
# .venv-tq's packages (torch, numpy, zmq, ...) through a .pth file, so torch is installed once;
# each client and the packages its backend's import chain needs are installed with --no-deps at
# the versions pinned in python/tests/serving/requirements-*.txt and
# python/tests/pd/requirements-*.txt.
#
#   scripts/setup_serving_venv.sh [PYTHON]     # default python3; needs .venv-tq first
#
# Built under .venv-serving.partial and renamed when complete.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-python3}"
# The P/D connector tests (python/tests/pd/) add what their connectors import beyond these.
REQS=(python/tests/serving/requirements-*.txt python/tests/pd/requirements-*.txt)
PROBE="import importlib.util as u, torch, mooncake.store; \
missing = [m for m in ('sglang', 'vllm', 'lmcache') if u.find_spec(m) is None]; \
assert not missing, missing; print('serving env ok, torch', torch.__version__)"
start=$(date +%s)
[ -x .venv-tq/bin/python ] || scripts/setup_tq_venv.sh "$PY"
if [ -x .venv-serving/bin/python ] && [ -f .venv-serving/.reqs ] \
    && cat "${REQS[@]}" | cmp -s - .venv-serving/.reqs \
    && PYTHONPATH=python .venv-serving/bin/python -c "$PROBE" 2>/dev/null; then
    echo "setup_serving_venv: .venv-serving is ready"
    exit 0
fi
rm -rf .venv-serving.partial
"$PY" -m venv .venv-serving.partial
tq_site=$(.venv-tq/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
site=$(.venv-serving.partial/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$tq_site" > "$site/zz_tq_env.pth"
cat "${REQS[@]}" | grep -v '^\s*#' | grep -v '^\s*$' | sort -u > .venv-serving.partial/requirements.txt
.venv-serving.partial/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
    -r .venv-serving.partial/requirements.txt
# The .pth names the absolute path of .venv-tq, which does not move; only this venv is renamed.
rm -rf .venv-serving
mv .venv-serving.partial .venv-serving
# Scripts installed by pip name the old interpreter path: repoint them.
grep -rl "$PWD/.venv-serving.partial" .venv-serving/bin 2>/dev/null \
    | xargs -r sed -i "s#$PWD/.venv-serving.partial#$PWD/.venv-serving#g"
cat "${REQS[@]}" > .venv-serving/.reqs
PYTHONPATH=python .venv-serving/bin/python -c "$PROBE" \
    || { echo "setup_serving_venv: the environment does not work" >&2; exit 1; }
echo "setup_serving_venv: done in $(( $(date +%s) - start )) s"
