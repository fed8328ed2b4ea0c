"""The test PostgreSQL server is real: it enforces primary keys and rolls back on conflict."""

from __future__ import annotations

import os

import psycopg
import pytest
from psycopg import sql

from service.dev.postgres_server import LocalPostgres, PostgresServerError, find_bin_dir


def test_primary_key_conflict_rejects_and_rolls_back(postgres_dsn: str, unique_name: str) -> None:
    table = sql.Identifier(unique_name)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(table))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'first')").format(table))

        with pytest.raises(psycopg.errors.UniqueViolation):
            with conn.transaction():
                conn.execute(sql.SQL("INSERT INTO {} VALUES (2, 'second')").format(table))
                conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'dup')").format(table))

        rows = conn.execute(sql.SQL("SELECT id, v FROM {} ORDER BY id").format(table)).fetchall()
    assert rows == [(1, "first")]


@pytest.mark.skipif(bool(os.environ.get("POSTGRES_DSN")), reason="POSTGRES_DSN names a server")
def test_local_server_stops_exactly_its_own_process() -> None:
    with LocalPostgres() as server:
        pid, base = server.pid, server.base_dir
        assert pid is not None and base is not None
        with psycopg.connect(server.dsn) as conn:
            assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not base.exists()


def test_missing_binaries_error_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("service.dev.postgres_server._BIN_GLOB", "/nonexistent/*/bin")
    with pytest.raises(PostgresServerError, match="postgresql"):
        find_bin_dir()
