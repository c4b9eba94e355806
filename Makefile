# The README's two commands: `make workbook` (the whole workbook on the demo world) and
# `make test` (the test suite). Each sets up .venv first (scripts/setup.sh, idempotent).
# `make check` is the inner loop: ruff and every test that starts no world build, notebook kernel, engine or
# browser (the tiers of tests/tiers.py), with the hypothesis profile `dev`. CONTRIBUTING.md says what to run when.
VENV := .venv/bin
export HF_HUB_OFFLINE ?= 1
CHECK_TIERS := not (world or notebook or engine or browser or slow)

.PHONY: setup test check workbook smoke world report showroom lint engine

setup:
	@bash scripts/setup.sh

# two workers (pytest-xdist): the notebooks', browser's and slow tests on one, one after the other, vLLM's on one
# (tests/tiers.py: TIER_GROUPS)
test: setup
	$(VENV)/python -m pytest -n 2 --dist loadgroup

check: setup
	$(VENV)/ruff check eaglelab tests benchmarks
	$(VENV)/python -m pytest -m "$(CHECK_TIERS)" --hypothesis-profile=dev -n 2

workbook: setup world
	$(VENV)/eaglelab run --out runs/workbook
	$(VENV)/eaglelab report --figures figures

# the showroom (docs/example): a whole workbook run's game plan, figures and notebooks, stamped with the commit
showroom: workbook
	$(VENV)/eaglelab showroom --commit "$$(git rev-parse HEAD)" --root "$$(pwd)" --force

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
