#!/usr/bin/env bash
# The prepared GPU check (issue #42 item 4): on a lent device machine that has torch, transformers, safetensors
# and accelerate, from the repository root, fetching nothing; at most 8 minutes in all. Every figure goes to one
# JSON file: the first argument, else $OUT/gpu_check.json (the device tool's output folder), else ./gpu_check.json.
#   bash benchmarks/gpu_check.sh [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-.}/gpu_check.json}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python -c "import torch, transformers, safetensors; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
timeout 480 python benchmarks/gpu_check.py --out "$out" --devices cuda cpu --budget-s 420
