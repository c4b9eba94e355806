#!/usr/bin/env bash
# Create (or reuse) .venv and install eaglelab with its dev tools. Safe to run again: it only
# reinstalls when pyproject.toml changed. Torch 2.13.0 is installed first when no torch is
# present (on the project's machines that pin takes a local CPU build; see README).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.eaglelab-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
want="$want $(sha256sum scripts/setup.sh | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && .venv/bin/python -c "import eaglelab, torch, specforge, speculators" 2>/dev/null; then
  exit 0
fi
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "torch==${EAGLELAB_TORCH_VERSION:-2.13.0}"
fi
.venv/bin/python -m pip install -q -e ".[dev]"
# The reference engines' own code (argument parsers, config schemas, converters), pinned and without
# their serving stacks (sglang, vllm, GPU kernels): the tests check eaglelab's recipes against them.
.venv/bin/python -m pip install -q --no-deps "specforge==0.2.0" "speculators==0.9.0" "hs-connectors==0.9.0"
echo "$want" > "$stamp"
