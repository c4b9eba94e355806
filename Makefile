# The README's two commands: `make workbook` (the whole workbook on the demo world) and
# `make test` (the test suite). Each sets up .venv first (scripts/setup.sh, idempotent).
VENV := .venv/bin
export HF_HUB_OFFLINE ?= 1

.PHONY: setup test workbook smoke world report lint engine

setup:
	@bash scripts/setup.sh

test: setup
	$(VENV)/python -m pytest

workbook: setup world
	$(VENV)/eaglelab run --out runs/workbook
	$(VENV)/eaglelab report --figures figures

smoke: setup
	$(VENV)/eaglelab run --smoke --out runs/smoke

world: setup
	$(VENV)/eaglelab demo build

report: setup
	$(VENV)/eaglelab report --figures figures

# vLLM (CPU build) in its own environment, .venv-vllm: notebooks 03 / 04 and `eaglelab engine` measure in it
engine:
	@bash scripts/setup-engine.sh

lint: setup
	$(VENV)/ruff check eaglelab tests benchmarks
