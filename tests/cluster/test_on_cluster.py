"""The word-count app on a real standalone cluster (a master, two 1-core workers), exact in every
sink through executor, worker and driver deaths and speculative task copies.

Every test runs `examples.wordcount_all_sinks` (Kafka, PostgreSQL and files outputs), and the
driver-kill test the stateful `examples.stateful_all_sinks` (running totals and sliding windows),
as a real `dstreams run` subprocess with `spark.master` set to the module's cluster. The job's
package is shipped to the executors as a zip: the workers' environment holds no copy of it. Tests
that kill a worker start it again before they end, so the next test finds two.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from service.dev.spark_cluster import LocalSparkCluster
from tests.chaos.conftest import (
    OUTPUTS,
    ChaosApp,
    log_text,
    make_lines,
    metric,
    produce,
    wait_until,
    word_totals,
)
from tests.chaos.stateful_checks import (
    CHECKPOINT_EVERY,
    check_windows,
    stateful_config,
    verify_totals,
)
from tests.cluster.conftest import (
    FIRST_BATCH_TIMEOUT_S,
    cluster_driver,
    cluster_settings,
    spark_log_lines,
)
from tests.soak import soak_only

LINES = 8_000
# 2,000 lines a batch: four batches or so, each still running when the next is due.
RATE_PER_PARTITION = 500
EXIT_REFUSED = 4
# The stateful app reads 1,000 lines a batch: 8 batches of input, killed after a checkpoint.
STATEFUL_RATE_PER_PARTITION = 250
# Batches of the restarted driver: the sliding windows need 5 boundaries (2 s apart) or more.
WINDOW_BATCHES = 12


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def preloaded(app: ChaosApp, seed: int, count: int = LINES) -> list[str]:
    app.rate_per_partition = RATE_PER_PARTITION
    lines = make_lines(seed, count)
    produce(app.bootstrap, app.input_topic, [line.encode() for line in lines])
    return lines


def test_the_cluster_has_two_workers_on_their_own_loopback_addresses(
    spark_cluster: LocalSparkCluster,
) -> None:
    state = spark_cluster.master_state()
    hosts = sorted(worker["host"] for worker in state["workers"] if worker["state"] == "ALIVE")
    assert hosts == ["127.0.0.2", "127.0.0.3"]
    assert all(worker["cores"] == 1 for worker in state["workers"])


@pytest.mark.timeout(400)
def test_word_count_on_the_cluster_is_exact_in_every_sink(
    spark_cluster: LocalSparkCluster, chaos_app: ChaosApp
) -> None:
    app = chaos_app
    lines = preloaded(app, 21)
    driver = cluster_driver(app, spark_cluster)

    driver.start()
    app.wait_drained(driver)
    # Both workers ran an executor for this driver.
    assert all(spark_cluster.executor_pids(i) for i in range(2)), driver.log_tail()
    writes = metric(driver, "dstreams_sink_partition_writes_total", output="counts_kafka")
    opened = metric(driver, "dstreams_sink_clients_opened_total", output="counts_kafka")
    app.stop(driver)

    assert writes and opened is not None and opened <= writes
    print(f"Kafka sink: producers initialized in {opened:.0f} of {writes:.0f} partition-batches")
    app.verify(word_totals(lines))


@pytest.mark.timeout(400)
def test_a_job_the_executors_cannot_import_is_refused_at_start_up(
    spark_cluster: LocalSparkCluster, chaos_app: ChaosApp
) -> None:
    app = chaos_app
    driver = app.service(
        spark={**cluster_settings(spark_cluster), "ship_job": "never"},
        checkpoint={"path": str(app.workdir / "checkpoints")},
        name="unshipped",
    )
    driver.start()
    code = driver.wait(300)

    assert code == EXIT_REFUSED, driver.log_tail()
    text = log_text(driver)
    assert "ClusterError" in text and "No module named 'examples'" in text, driver.log_tail()


@pytest.mark.timeout(500)
def test_an_executor_jvm_killed_mid_batch_costs_a_task_rerun_not_a_record(
    spark_cluster: LocalSparkCluster, chaos_app: ChaosApp
) -> None:
    app = chaos_app
    lines = preloaded(app, 22)
    driver = cluster_driver(app, spark_cluster)

    driver.start()
    app.wait_completed(driver, timeout_s=FIRST_BATCH_TIMEOUT_S)
    (executor,) = spark_cluster.executor_pids(0)
    os.kill(executor, signal.SIGKILL)
    wait_until(lambda: not alive(executor), 30, f"executor {executor} to die")
    app.wait_drained(driver)
    # The master replaced the lost executor on its worker.
    replacements = spark_cluster.executor_pids(0)
    app.stop(driver)

    assert driver.starts == 1 and len(app.journal_state().epochs) == 1
    assert replacements and executor not in replacements
    app.verify(word_totals(lines))


@pytest.mark.timeout(500)
def test_a_new_driver_takes_over_the_running_totals_after_the_driver_is_killed(
    spark_cluster: LocalSparkCluster, chaos_app: ChaosApp
) -> None:
    """The stateful app (running totals to Kafka and PostgreSQL, sliding windows to files) on the
    cluster: its driver is SIGKILLed after a checkpoint, and the next one loads that checkpoint
    (written by the executors to the shared path) and carries the state on, exactly."""
    app = chaos_app
    app.rate_per_partition = STATEFUL_RATE_PER_PARTITION
    lines = make_lines(23, LINES)
    positions = produce(app.bootstrap, app.input_topic, [line.encode() for line in lines])
    driver = app.service("stateful", spark=cluster_settings(spark_cluster), **stateful_config(app))

    driver.start()
    app.wait_completed(driver, CHECKPOINT_EVERY + 1, FIRST_BATCH_TIMEOUT_S)
    assert driver.kill() == -9
    driver.start()
    app.wait_drained(driver)
    # Windows keep sliding over the drained input until enough boundaries were written.
    app.wait_completed(driver, WINDOW_BATCHES, FIRST_BATCH_TIMEOUT_S)
    app.stop(driver)

    state = app.journal_state()
    assert len(state.epochs) == 2
    assert "state restored from the checkpoint of batch" in log_text(driver), driver.log_tail()
    verify_totals(app, word_totals(lines))
    line_at = dict(zip(positions, lines, strict=True))
    print(f"{check_windows(app, state, line_at)} window files equal their reference")


@pytest.mark.timeout(500)
@soak_only("a straggler held for a minute: over a minute on the cluster")
def test_speculative_copies_of_a_straggler_collapse_to_one_committed_copy(
    spark_cluster: LocalSparkCluster, chaos_app: ChaosApp
) -> None:
    """Task 0 of every output commits, then straggles; Spark's speculative copy on the other
    worker finds the batch committed and skips; the straggler is killed."""
    app = chaos_app
    lines = preloaded(app, 24, LINES // 2)
    driver = cluster_driver(
        app,
        spark_cluster,
        **{
            "spark.speculation": "true",
            "spark.speculation.interval": "200ms",
            "spark.speculation.quantile": "0.5",
            "spark.speculation.multiplier": "2",
            "spark.executorEnv.DSTREAMS_STRAGGLE_AT": "task-after-write",
            "spark.executorEnv.DSTREAMS_STRAGGLE_PARTITION": "0",
            "spark.executorEnv.DSTREAMS_STRAGGLE_S": "60",
        },
    )

    driver.start()

    def every_output_skipped_a_copy() -> bool:
        assert driver.running(), driver.log_tail()
        found = [
            metric(driver, "dstreams_duplicate_writes_suppressed_total", output=o) for o in OUTPUTS
        ]
        return all(n is not None and n >= 1 for n in found)

    wait_until(every_output_skipped_a_copy, 300, "a speculative copy skipped in every output")
    app.wait_drained(driver)
    app.stop(driver)

    assert spark_log_lines(driver, r"speculatable"), "Spark marked no task speculatable"
    assert "was written by attempt 1" in log_text(driver)
    app.verify(word_totals(lines))


@pytest.mark.timeout(500)
@soak_only("a worker killed and restarted: over a minute on the cluster")
def test_the_job_goes_on_with_one_worker_after_the_other_is_killed(
    spark_cluster: LocalSparkCluster, chaos_app: ChaosApp
) -> None:
    app = chaos_app
    lines = preloaded(app, 25)
    driver = cluster_driver(app, spark_cluster)

    driver.start()
    app.wait_completed(driver, timeout_s=FIRST_BATCH_TIMEOUT_S)
    executors = spark_cluster.executor_pids(1)
    try:
        spark_cluster.kill_worker(1)
        # The worker's executor notices its worker is gone and exits: gone for good.
        wait_until(lambda: not any(alive(pid) for pid in executors), 60, "the executor to exit")
        started = time.monotonic()
        app.wait_drained(driver)
        print(f"drained {time.monotonic() - started:.0f}s after the worker was killed")
        app.stop(driver)
    finally:
        spark_cluster.restart_worker(1)

    assert executors, "worker 1 ran no executor for the driver"
    assert driver.starts == 1 and len(app.journal_state().epochs) == 1
    app.verify(word_totals(lines))
