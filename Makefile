# One task runner for people and CI. Every target installs what it needs by itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PACKAGES := service connectors sinks
PYTEST_ARGS ?=

.PHONY: venv sysdeps lint format typecheck test test-fast demo bench bench-recovery clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.stamp-* && touch $@

sysdeps:
	@bash devtools/ensure-sysdeps.sh
	@bash devtools/ensure-helm.sh >/dev/null

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

typecheck: venv
	$(VENV)/bin/mypy $(PACKAGES)

test: lint typecheck sysdeps
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: venv
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

demo: venv sysdeps
	$(PY) -m service demo

bench: venv sysdeps
	$(PY) bench/wordcount_bench.py
	$(PY) bench/ingest_bench.py

bench-recovery: venv sysdeps
	$(PY) bench/recovery_bench.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
