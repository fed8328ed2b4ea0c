# One task runner for people and CI. Every target installs what it needs by itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PACKAGES := service connectors sinks
PYTEST_ARGS ?=
.PHONY: venv class-archive sysdeps lint format typecheck test test-fast test-containers image demo bench \
	bench-recovery bench-state soak clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.stamp-* && touch $@

# The driver JVM's class-data archive (service/driver/class_archive.py): Spark starts about a
# second faster with it. Built once per JVM and pyspark; without it Spark only starts slower.
class-archive: venv
	-@$(VENV)/bin/dstreams class-archive --if-missing

sysdeps:
	@bash devtools/ensure-sysdeps.sh
	@bash devtools/ensure-helm.sh >/dev/null
	@bash devtools/ensure-seaweedfs.sh >/dev/null

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-logo
	$(PY) devtools/check_function_length.py $(PACKAGES)

format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

typecheck: venv
	$(VENV)/bin/mypy $(PACKAGES)

test: lint typecheck sysdeps class-archive
	$(PY) devtools/test_streams.py --durations=50 $(PYTEST_ARGS)

# The container tier alone: a Docker engine, the local Kafka image under Testcontainers, the
# dstreams image run as the Helm chart runs it (see devtools/test_streams.py).
test-containers: venv sysdeps class-archive
	DSTREAMS_TEST_STREAMS=containers $(PY) devtools/test_streams.py $(PYTEST_ARGS)

# The dstreams image (and the local base it stands on), built only when its content changed.
# DSTREAMS_IMAGE_BASES=public builds from python:3.11-slim-bookworm where it can be pulled.
image: venv sysdeps
	$(PY) -m service.dev.images dstreams

test-fast: venv
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

demo: venv sysdeps class-archive
	$(PY) -m service demo

bench: venv sysdeps class-archive
	$(PY) bench/wordcount_bench.py
	$(PY) bench/latency_bench.py
	$(PY) bench/cluster_bench.py
	$(PY) bench/ingest_bench.py
	$(PY) bench/secure_bench.py

bench-recovery: venv sysdeps class-archive
	$(PY) bench/recovery_bench.py

bench-state: venv sysdeps class-archive
	$(PY) bench/state_bench.py
	$(PY) bench/disk_state_bench.py
	$(PY) bench/event_time_bench.py

# Runs too long for `make test` (DSTREAMS_SOAK=1 turns them on, see tests/soak.py): 10,000,000 keys
# of state on disk within a memory bound, the stateful
# long run at 1,000 batches, the stateful chaos test at the issue's full size (200,000 lines, every
# crash point, 10 SIGKILLs in all) and on object storage, the event-time chaos test at its full
# size (60,000 clicks, 10 driver SIGKILLs), the ingest fault run, the Kafka journal's leader
# killed, every broker down for longer than the Kafka sink's transaction timeout, PostgreSQL down
# for 60 s, the full random-kill and dead-letter runs, the crash points `make test` covers through
# other sinks, and the cluster's straggler and lost-worker runs.
soak: export DSTREAMS_SOAK=1
soak: venv sysdeps class-archive
	$(PY) -m pytest tests/spark/test_disk_state_large.py $(PYTEST_ARGS)
	DSTREAMS_LONG_RUN_BATCHES=1000 $(PY) -m pytest tests/spark/test_state_long_run.py $(PYTEST_ARGS)
	DSTREAMS_STATE_CHAOS_LINES=200000 DSTREAMS_STATE_CHAOS_KILLS=10 DSTREAMS_STATE_CHAOS_POINTS=all \
		$(PY) -m pytest tests/chaos/test_state_chaos.py $(PYTEST_ARGS)
	$(PY) -m pytest tests/chaos/test_replication_faults.py \
		tests/chaos/test_brokers_down_past_transaction_timeout.py $(PYTEST_ARGS)
	$(PY) -m pytest tests/chaos/test_sink_outage.py -k mid_stream $(PYTEST_ARGS)
	$(PY) -m pytest tests/chaos/test_driver_kills.py tests/chaos/test_dead_letters.py \
		"tests/chaos/test_crash_points.py::test_each_crash_point_then_restart_is_exact[kafka-first]" \
		"tests/chaos/test_worker_death.py::test_python_worker_death_is_retried_by_spark[task-before-write]" \
		$(PYTEST_ARGS)
	$(PY) -m pytest tests/cluster/test_on_cluster.py -k "speculative or one_worker" $(PYTEST_ARGS)
	DSTREAMS_EVENT_CHAOS_LINES=60000 DSTREAMS_EVENT_CHAOS_KILLS=10 \
		$(PY) -m pytest tests/chaos/test_event_time_chaos.py $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
