"""The PostgreSQL sink against a real server: each BatchKey commits exactly once, whatever fails.

What every sink does (idempotent and atomic writes, replays, commits, racing copies) is checked
on this one too by the sink contract suite, tests/contracts/test_sink_contract.py.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from service.errors import SinkError
from sinks import postgres
from sinks.base import BatchKey, WriteResult
from sinks.postgres import PostgresSink

WORDS = [("a", 1), ("b", 2), ("c", 3)]


@pytest.fixture(autouse=True)
def no_fault_hook() -> Iterator[None]:
    yield
    postgres.set_fault_hook(None)


def make_sink(dsn: str, name: str, **kwargs: Any) -> PostgresSink:
    options: dict[str, Any] = {
        "columns": ["word", "count"],
        "column_types": {"word": "text", "count": "bigint"},
        "markers_table": f"{name}_markers",
    }
    sink = PostgresSink(dsn, name, **(options | kwargs))
    sink.setup("app", "out")
    return sink


def key(partition: int = 0, batch_time: int = 1000) -> BatchKey:
    return BatchKey("app", "out", batch_time, partition)


def table_rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT * FROM {} ORDER BY 1, 2").format(sql.Identifier(table))
        return conn.execute(query).fetchall()


def marker_count(dsn: str, sink: PostgresSink) -> int:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(sink.markers_table))
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def test_rows_may_be_mappings_and_the_table_may_predefine_columns(
    postgres_dsn: str, unique_name: str
) -> None:
    make_sink(postgres_dsn, unique_name)
    sink = PostgresSink(postgres_dsn, unique_name, markers_table=f"{unique_name}_markers")

    result = sink.write(key(), [{"count": 1, "word": "a", "extra": "ignored"}, ("b", 2)])

    assert result == WriteResult(rows=2)
    assert table_rows(postgres_dsn, unique_name) == [("a", 1), ("b", 2)]


def test_upsert_mode_overwrites_rows_with_the_same_key(postgres_dsn: str, unique_name: str) -> None:
    sink = make_sink(postgres_dsn, unique_name, key_columns=["word"])

    sink.write(key(batch_time=1000), WORDS)
    sink.write(key(batch_time=2000), [("a", 10), ("d", 4)])
    assert sink.write(key(batch_time=2000), [("a", 99)]).skipped

    assert table_rows(postgres_dsn, unique_name) == [("a", 10), ("b", 2), ("c", 3), ("d", 4)]


def test_concurrent_duplicate_writes_commit_exactly_once(
    postgres_dsn: str, unique_name: str
) -> None:
    sink = make_sink(postgres_dsn, unique_name)
    first_holds_marker, release_first = threading.Event(), threading.Event()

    def hold_first(point: str, _key: BatchKey, _pid: int) -> None:
        if point == "after_marker" and threading.current_thread().name == "first":
            first_holds_marker.set()
            release_first.wait(timeout=30)

    postgres.set_fault_hook(hold_first)
    results: dict[str, WriteResult] = {}

    def run(name: str) -> None:
        results[name] = sink.write(key(), WORDS)

    first = threading.Thread(target=run, args=("first",), name="first")
    second = threading.Thread(target=run, args=("second",), name="second")
    first.start()
    assert first_holds_marker.wait(timeout=30)
    second.start()
    wait_for_lock_waiter(postgres_dsn)  # the second copy blocks on the first's marker
    release_first.set()
    first.join(timeout=30)
    second.join(timeout=30)

    assert results == {"first": WriteResult(rows=3), "second": WriteResult(rows=0, skipped=True)}
    assert table_rows(postgres_dsn, unique_name) == WORDS
    assert marker_count(postgres_dsn, sink) == 1


def wait_for_lock_waiter(dsn: str) -> None:
    query = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = 'dstreams-sink' AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + 30
    with psycopg.connect(dsn, autocommit=True) as conn:
        while (row := conn.execute(query).fetchone()) is not None and row[0] == 0:
            assert time.monotonic() < deadline, "the second writer never waited on the marker"
            time.sleep(0.02)


def terminate(dsn: str, backend_pid: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The timeout makes the call wait until the backend has really gone.
        conn.execute("SELECT pg_terminate_backend(%s, 10000)", (backend_pid,))


def test_close_drops_the_cached_connection_and_may_run_twice(
    postgres_dsn: str, unique_name: str
) -> None:
    sink = make_sink(postgres_dsn, unique_name)
    backends: list[int] = []
    postgres.set_fault_hook(lambda point, _key, pid: backends.append(pid))
    sink.write(key(batch_time=1000), WORDS[:1])
    sink.write(key(batch_time=2000), WORDS[1:2])
    assert backends[0] == backends[-1]  # one cached connection serves both writes

    sink.close()
    sink.close()
    sink.write(key(batch_time=3000), WORDS[2:])

    assert backends[-1] != backends[0]  # closed, so the next write connected anew
    assert table_rows(postgres_dsn, unique_name) == WORDS


def test_backend_killed_before_commit_is_settled_by_retrying(
    postgres_dsn: str, unique_name: str
) -> None:
    sink = make_sink(postgres_dsn, unique_name)
    killed: list[int] = []

    def kill_once(point: str, _key: BatchKey, pid: int) -> None:
        if point == "after_rows" and not killed:
            killed.append(pid)
            terminate(postgres_dsn, pid)

    postgres.set_fault_hook(kill_once)

    assert sink.write(key(), WORDS) == WriteResult(rows=3)
    assert len(killed) == 1
    assert table_rows(postgres_dsn, unique_name) == WORDS
    assert marker_count(postgres_dsn, sink) == 1


def test_commit_that_landed_but_was_not_acknowledged_is_settled_as_committed(
    postgres_dsn: str, unique_name: str
) -> None:
    sink = make_sink(postgres_dsn, unique_name)
    calls: list[str] = []

    def lose_commit_reply(point: str, _key: BatchKey, pid: int) -> None:
        calls.append(point)
        if point == "after_commit" and calls.count("after_commit") == 1:
            terminate(postgres_dsn, pid)
            msg = "simulated: connection lost while COMMIT's reply was in flight"
            raise psycopg.OperationalError(msg)

    postgres.set_fault_hook(lose_commit_reply)

    assert sink.write(key(), WORDS) == WriteResult(rows=3)
    assert calls == ["after_marker", "after_rows", "after_commit"]  # settled, not rewritten
    assert table_rows(postgres_dsn, unique_name) == WORDS
    assert marker_count(postgres_dsn, sink) == 1


def test_commit_names_missing_partitions_and_is_idempotent(
    postgres_dsn: str, unique_name: str
) -> None:
    sink = make_sink(postgres_dsn, unique_name)
    for p in (0, 2):
        sink.write(key(partition=p), [(f"w{p}", p)])

    with pytest.raises(SinkError, match=r"missing partitions \[1, 3\]"):
        sink.commit("app", "out", 1000, 4)

    for p in (1, 3):
        sink.write(key(partition=p), [])
    sink.commit("app", "out", 1000, 4)
    sink.commit("app", "out", 1000, 4)


def test_a_malformed_row_fails_the_write_and_leaves_nothing_behind(
    postgres_dsn: str, unique_name: str
) -> None:
    sink = make_sink(postgres_dsn, unique_name)

    with pytest.raises(SinkError, match="expected rows of 2 values"):
        sink.write(key(), [("a", 1), ("b",)])

    assert sink.write(key(), WORDS) == WriteResult(rows=3)
    assert table_rows(postgres_dsn, unique_name) == WORDS


def test_the_sink_pickles_as_configuration(postgres_dsn: str, unique_name: str) -> None:
    sink = make_sink(postgres_dsn, unique_name)
    sink.write(key(partition=0), WORDS)  # a cached connection must not travel with it

    copy = pickle.loads(pickle.dumps(sink))  # noqa: S301 - our own bytes

    assert copy.write(key(partition=1), [("z", 26)]) == WriteResult(rows=1)
    assert postgres_dsn not in repr(copy)


def test_errors_and_logs_never_show_the_password(
    postgres_dsn: str, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = "host=127.0.0.1 port=1 user=nobody password=s3cret-pw connect_timeout=2"
    sink = PostgresSink(dsn, unique_name, columns=["word", "count"])

    with pytest.raises(SinkError) as error:
        sink.write(key(), WORDS)
    with pytest.raises(SinkError) as bad_dsn:
        PostgresSink("port=x password=s3cret-pw", unique_name).setup("app", "out")

    for text in (str(error.value), str(bad_dsn.value), caplog.text, repr(sink)):
        assert "s3cret" not in text


def test_setup_without_types_for_a_missing_table_says_what_to_do(
    postgres_dsn: str, unique_name: str
) -> None:
    sink = PostgresSink(postgres_dsn, unique_name, columns=["word", "count"])

    with pytest.raises(SinkError, match="column_types"):
        sink.setup("app", "out")


def test_bad_configuration_is_refused_at_construction(postgres_dsn: str) -> None:
    with pytest.raises(SinkError, match="key_columns"):
        PostgresSink(postgres_dsn, "t", columns=["a"], key_columns=["b"])
    with pytest.raises(SinkError, match="SQL type"):
        PostgresSink(postgres_dsn, "t", columns=["a"], column_types={"a": "int; DROP TABLE t"})
    with pytest.raises(SinkError, match="table name"):
        PostgresSink(postgres_dsn, "a.b.c")


def test_driver_calls_reconnect_after_the_server_dropped_the_connection(
    postgres_dsn: str, unique_name: str
) -> None:
    sink = make_sink(postgres_dsn, unique_name)
    sink.write(key(), WORDS)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
            "WHERE application_name = 'dstreams-sink'"
        )

    sink.commit("app", "out", 1000, 1)
