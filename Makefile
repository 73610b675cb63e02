# tracelake — setup, demo, tests. Everything installs into ./.venv from requirements.lock.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tracelake-installed

.PHONY: setup demo lint test test-fast bench hta-venv clean

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml jobs/normalize/kineto/_kineto_scan.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

## demo: capture a real 2-rank DDP training job and run the main job on it (Spark local, MLflow sqlite)
demo: setup
	$(VENV)/bin/tracelake demo --workdir demo

## lint: ruff (lint and format check), mypy over the seams, import-linter contracts (pyproject.toml)
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

## test: lint, then the whole test suite on two xdist workers (what CI runs; tests/conftest.py says how the
## work is spread), the 25 slowest steps printed
test: lint
	$(PY) -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder --durations=25

## test-fast: unit tests only
test-fast: setup
	$(PY) -m pytest -q tests/unit

## hta-venv: HTA 0.5.0 in its own venv (for golden data and benchmarks)
hta-venv:
	bash benchmarks/hta_venv.sh

## bench: parse+normalize throughput and memory vs HTA 0.5.0
bench: setup hta-venv
	$(PY) benchmarks/normalize_bench.py

clean:
	rm -rf demo $(VENV)/.tracelake-installed .pytest_cache
