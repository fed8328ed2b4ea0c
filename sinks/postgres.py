"""PostgreSQL sink: each task's rows and its marker row commit together in one transaction.

``write(key, rows)`` on an executor:

1. Take this process's (and thread's) connection for the DSN, opening it if needed.
2. In one READ COMMITTED transaction insert the marker ``(app, output, batch_time, partition)``
   with ``ON CONFLICT DO NOTHING``. No row inserted means the key is already committed (a concurrent
   copy holding the marker is waited for), so roll back and report the write as skipped.
3. Insert the rows: ``COPY`` for plain inserts; ``INSERT ... ON CONFLICT (key_columns) DO UPDATE``
   when ``key_columns`` is set.
4. COMMIT.
5. After a connection error anywhere above (above all during COMMIT, whose outcome is then
   unknown), drop the connection, reconnect and go back to step 2, whose marker insert settles
   the doubt: the marker is present (committed: skip) or absent (write again). Each marker names
   the write call that made it, so a settled write knows whether its own copy committed.

A server that stays down longer than a write's few attempts fails the task and then the write
job; the driver then asks `unreachable()` and, while the server is down, waits for it for up to
`outage_limit_s` before running the job again (`WaitsOutOutages`, docs/architecture.md, "Faults").

Rows are tuples or lists (mapped to ``columns`` in order, e.g. a word count's ``(word, count)``)
or mappings (read by column name; extra keys are ignored). Without ``columns`` the table must exist
and all its columns are used, in table order. The sink pickles to executors as configuration only;
connections never travel.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import astuple
from typing import Any, NamedTuple, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from pydantic import SecretStr

from connectors.process_cache import ProcessCache
from service import faults
from service.errors import SinkError
from sinks.base import BatchKey, WithoutKafka, WriteResult, error_chain

log = logging.getLogger(__name__)

# One write call tries this many times before failing the task (Spark then retries the task).
_ATTEMPTS = 4
# Seconds before retry n is 0.2 * n: long enough for a restarted server, short against a 1 s batch.
_BACKOFF_S = 0.2
# Must stay well under Spark's task timeouts so a dead server fails the task rather than hanging it.
_CONNECT_TIMEOUT_S = 10
# What a server may stay down before the service stops: restarts and fail-overs take seconds to
# a minute or two; longer is an incident for a person (`sinks.<name>.outage_limit_ms`).
DEFAULT_OUTAGE_LIMIT_S = 300.0
# The driver's probe of a server that is down: refused at once, or dropped on the floor.
_PROBE_TIMEOUT_S = 5
_APP = "dstreams-sink"  # application_name, so operators can find our sessions in pg_stat_activity
_SQL_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_ ]*(\(\s*\d+\s*(,\s*\d+\s*)?\))?(\[\])?$")

FaultHook = Callable[[str, BatchKey, int], None]
_fault_hook: FaultHook | None = None

Conn = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")


class MarkerTally(NamedTuple):
    """An output's marker rows as `(batch_time, partition, row_count)`, and how many markers
    (and rows they counted) `forget_before` has deleted."""

    markers: list[tuple[int, int, int]]
    forgotten_markers: int
    forgotten_rows: int


def set_fault_hook(hook: FaultHook | None) -> None:
    """For tests: call ``hook(point, key, backend_pid)`` at each write's named points
    ``after_marker``, ``after_rows`` and ``after_commit``; ``None`` removes it."""
    global _fault_hook
    _fault_hook = hook


class PostgresSink(WithoutKafka):
    """Writes each ``BatchKey`` to ``table`` exactly once; see the module docstring."""

    writes_on_driver = False
    writes_in_parallel = False

    def __init__(
        self,
        dsn: str | SecretStr,
        table: str,
        columns: Sequence[str] | None = None,
        key_columns: Sequence[str] | None = None,
        markers_table: str = "dstreams_batches",
        column_types: Mapping[str, str] | None = None,
        version_column: str | None = None,
        outage_limit_s: float = DEFAULT_OUTAGE_LIMIT_S,
    ) -> None:
        """``column_types`` (name -> SQL type) is needed only if ``setup`` must create ``table``.

        ``version_column`` (with ``key_columns``): an upsert replaces a row only with a higher
        value there, so an event-time window's row keeps its highest revision whatever order
        corrections arrive in. ``outage_limit_s``: how long the driver waits for a server that
        is down (see the module docstring)."""
        self._dsn = dsn if isinstance(dsn, SecretStr) else SecretStr(dsn)
        self.table = table
        self.columns = list(columns) if columns is not None else None
        self.key_columns = list(key_columns) if key_columns else None
        self.markers_table = markers_table
        self.column_types = dict(column_types) if column_types else None
        self.version_column = version_column
        self.outage_limit_s = outage_limit_s
        self._resolved: list[str] | None = self.columns
        _check_config(self)

    def __repr__(self) -> str:
        return (
            f"PostgresSink(table={self.table!r}, columns={self.columns!r}, "
            f"key_columns={self.key_columns!r}, markers_table={self.markers_table!r})"
        )

    # --- driver side ---------------------------------------------------------------------

    def setup(self, app: str, output: str) -> None:
        """Create the marker table, and the data table when missing; check configured columns."""
        self._on_driver(f"set up tables for {app}/{output}", self._setup_tables)

    def _setup_tables(self, conn: Conn) -> None:
        conn.execute(_marker_sql(self.markers_table)[0])
        existing = _table_columns(conn, self.table)
        if not existing:
            conn.execute(self._table_ddl())
        unknown = [c for c in (self.columns or []) if existing and c not in existing]
        if unknown:
            msg = (
                f"expected table {self.table} to have columns {self.columns}, it lacks {unknown}; "
                "alter the table or the sink's `columns`"
            )
            raise SinkError(msg)
        conn.commit()

    def commit(self, app: str, output: str, batch_time: int, partitions: int) -> None:
        """Check that every partition's marker of this batch exists; read-only, so idempotent."""
        if partitions == 0:
            return  # an empty batch wrote nothing: no round trip (a run of them after an outage)
        query = sql.SQL(
            "SELECT {p} FROM {m} WHERE app = %s AND output = %s AND batch_time = %s"
        ).format(p=sql.Identifier("partition"), m=_ident(self.markers_table))

        def read(conn: Conn) -> set[int]:
            return {int(row[0]) for row in conn.execute(query, (app, output, batch_time))}

        found = self._on_driver(f"read markers of batch {batch_time}", read)
        missing = sorted(set(range(partitions)) - found)
        if missing:
            msg = (
                f"expected markers for all {partitions} partitions of batch {batch_time} of "
                f"{app}/{output} in {self.markers_table}, missing partitions {missing}; re-run "
                "the batch's output (partitions already committed are skipped)"
            )
            raise SinkError(msg)

    def forget_before(self, app: str, output: str, batch_time: int) -> None:
        """Delete the marker rows of batches before `batch_time`: no replay can ask for them.

        Their row counts are added up in the tally table (`tally_table`) in the same
        transaction, so the audit can still hold every row of the table against a marker."""
        delete = sql.SQL(
            "DELETE FROM {m} WHERE app = %s AND output = %s AND batch_time < %s RETURNING row_count"
        ).format(m=_ident(self.markers_table))
        ddl, add = _tally_sql(self.tally_table)

        def forget(conn: Conn) -> int:
            conn.execute(ddl)
            counts = [int(row[0]) for row in conn.execute(delete, (app, output, batch_time))]
            conn.execute(add, (app, output, len(counts), sum(counts), batch_time))
            conn.commit()
            return len(counts)

        deleted = self._on_driver(f"forget markers before batch {batch_time}", forget)
        log.info("%s/%s: %d marker rows before batch %d deleted", app, output, deleted, batch_time)

    @property
    def tally_table(self) -> str:
        """Where `forget_before` adds up the markers it deleted, per (app, output)."""
        return f"{self.markers_table}_forgotten"

    def audit_markers(self, app: str, output: str) -> MarkerTally:
        """For `dstreams audit`: every marker row of (app, output), and the tally of deleted
        ones; read-only."""
        read = sql.SQL(
            "SELECT batch_time, {p}, row_count FROM {m} WHERE app = %s AND output = %s"
        ).format(p=sql.Identifier("partition"), m=_ident(self.markers_table))
        tally = sql.SQL("SELECT markers, row_count FROM {f} WHERE app = %s AND output = %s").format(
            f=_ident(self.tally_table)
        )

        def audit(conn: Conn) -> MarkerTally:
            rows = [(int(t), int(p), int(n)) for t, p, n in conn.execute(read, (app, output))]
            if not _table_columns(conn, self.tally_table):
                return MarkerTally(rows, 0, 0)
            forgotten = conn.execute(tally, (app, output)).fetchone()
            markers, count = (int(forgotten[0]), int(forgotten[1])) if forgotten else (0, 0)
            return MarkerTally(rows, markers, count)

        return self._on_driver(f"read the markers of {app}/{output}", audit)

    def count_rows(self) -> int:
        """For `dstreams audit`: the rows of the data table; read-only."""
        query = sql.SQL("SELECT count(*) FROM {t}").format(t=_ident(self.table))

        def count(conn: Conn) -> int:
            return sum(int(row[0]) for row in conn.execute(query))  # the one row count(*) gives

        return self._on_driver(f"count the rows of {self.table}", count)

    def unreachable(self) -> str | None:
        """Why the server cannot be used now (a fresh connection and a round trip), or None."""
        secret = self._dsn.get_secret_value()
        try:
            with psycopg.connect(
                secret, connect_timeout=_PROBE_TIMEOUT_S, application_name=_APP
            ) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError as exc:
            return _redact(f"{type(exc).__name__}: {exc}".strip(), self._dsn)
        return None

    def outage_in(self, error: BaseException) -> str | None:
        """Why `error` shows the server unanswering: a connection that failed or broke (no
        SQLSTATE, or class 08), or a server shutting down or starting (57P01-57P03). Errors the
        server reports about the work itself (a constraint, a full disk) are not outages."""
        for cause in error_chain(error):
            if isinstance(cause, psycopg.OperationalError) and _is_connection_loss(cause):
                return _redact(f"{type(cause).__name__}: {cause}".strip(), self._dsn)
        return None

    def close(self) -> None:
        """Close this process's (and thread's) cached connection to the DSN, if one is open."""
        _drop_connection(self._dsn)

    def _on_driver(self, what: str, work: Callable[[Conn], T]) -> T:
        """Run ``work`` on the cached connection; reconnect once if that connection went stale."""
        attempt = 1
        while True:
            conn: Conn | None = None
            try:
                conn = _connection(self._dsn)
                return work(conn)
            except psycopg.OperationalError as exc:
                _drop_connection(self._dsn)
                if attempt == 2:
                    raise self._error(what, exc) from None
            except psycopg.Error as exc:
                raise self._error(what, exc) from None
            finally:
                _rollback_quietly(conn)
            attempt += 1

    # --- executor side -------------------------------------------------------------------

    def write(self, key: BatchKey, rows: Iterable[Any]) -> WriteResult:
        """Commit ``rows`` and the marker of ``key`` atomically, unless ``key`` is committed."""
        batch = list(rows)  # a retry must replay the same rows, and `rows` may be an iterator
        writer = uuid.uuid4().hex
        what = f"write {key}"
        attempt = 1
        while True:
            conn: Conn | None = None
            try:
                conn = _connection(self._dsn)
                return self._write_once(conn, key, batch, writer)
            except psycopg.OperationalError as exc:
                _drop_connection(self._dsn)
                if attempt == _ATTEMPTS:
                    raise self._error(what, exc) from None
                log.warning("%s failed (attempt %d): %s", what, attempt, type(exc).__name__)
            except psycopg.Error as exc:
                _rollback_quietly(conn)
                raise self._error(what, exc) from None
            except BaseException:
                _rollback_quietly(conn)  # e.g. a malformed row: leave no transaction open
                raise
            time.sleep(_BACKOFF_S * attempt)
            attempt += 1

    def _write_once(self, conn: Conn, key: BatchKey, batch: list[Any], writer: str) -> WriteResult:
        columns = self._columns(conn)
        rows = [_as_tuple(row, columns) for row in batch]
        _, insert_marker, read_marker = _marker_sql(self.markers_table)
        with conn.cursor() as cur:
            cur.execute(insert_marker, (*astuple(key), len(rows), writer))
            if cur.fetchone() is None:  # committed already, or by a copy whose lock we waited on
                owner = cur.execute(read_marker, astuple(key)).fetchone()
                conn.rollback()
                if owner is not None and owner[0] == writer:
                    log.info("%s settled: an earlier attempt of it had committed", key)
                    return WriteResult(rows=len(rows))
                return WriteResult(rows=0, skipped=True)
            _fault("after_marker", key, conn)
            if rows and self.key_columns is None:
                copy_stmt = sql.SQL("COPY {} ({}) FROM STDIN").format(
                    _ident(self.table), _names(columns)
                )
                with cur.copy(copy_stmt) as copy:
                    for row in rows:
                        copy.write_row(row)
            elif rows and self.key_columns is not None:
                upsert = _upsert(self.table, columns, self.key_columns, self.version_column)
                cur.executemany(upsert, rows)
            _fault("after_rows", key, conn)
        faults.crash_point("sink-mid-write")
        conn.commit()
        _fault("after_commit", key, conn)
        return WriteResult(rows=len(rows))

    def _columns(self, conn: Conn) -> list[str]:
        if self._resolved is None:
            self._resolved = _table_columns(conn, self.table) or None
        if self._resolved is None:
            msg = f"expected table {self.table} to exist, found none; run the sink's setup() first"
            raise SinkError(msg)
        return self._resolved

    def _table_ddl(self) -> sql.Composed:
        if self.columns is None or self.column_types is None:
            msg = (
                f"expected table {self.table} to exist, or `columns` and `column_types` to be "
                "given so that it can be created; found neither: create it or configure both"
            )
            raise SinkError(msg)
        types = self.column_types
        parts = [
            sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(types[c])) for c in self.columns
        ]
        if self.key_columns:
            parts.append(sql.SQL("PRIMARY KEY ({})").format(_names(self.key_columns)))
        body = sql.SQL(", ").join(parts)
        return sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(_ident(self.table), body)

    def _error(self, what: str, exc: psycopg.Error) -> SinkError:
        detail = _redact(f"{type(exc).__name__}: {exc}", self._dsn)
        hint = "the server is up and the sink's DSN is right"
        if not isinstance(exc, psycopg.OperationalError):
            hint = f"the rows and the definitions of {self.table} and {self.markers_table} agree"
        msg = f"PostgreSQL sink for {self.table} could not {what}: {detail}; check that {hint}"
        return SinkError(msg)


def _check_config(sink: PostgresSink) -> None:
    """Fail at construction, on the driver, rather than in every executor task."""
    for name in (sink.table, sink.markers_table):
        _ident(name)
    cols, keys, types = sink.columns, sink.key_columns or [], sink.column_types or {}
    version = sink.version_column
    problem = ""
    if cols is not None and (not cols or len(set(cols)) != len(cols)):
        problem = f"`columns` to be distinct names, found {cols}"
    elif cols is not None and not set(keys) <= set(cols):
        problem = f"`key_columns` {keys} to be among `columns` {cols}"
    elif version is not None and (not keys or version in keys):
        problem = f"`version_column` {version!r} beside `key_columns` and not one of them"
    elif version is not None and cols is not None and version not in cols:
        problem = f"`version_column` {version!r} to be among `columns` {cols}"
    elif bad := [t for t in types.values() if not _SQL_TYPE.match(t)]:
        problem = f"`column_types` to hold SQL type names, found {bad}"
    elif types and cols is not None and set(cols) - set(types):
        problem = f"`column_types` for every column {cols}, found {list(types)}"
    if problem:
        msg = f"expected {problem}; fix the sink's configuration"
        raise SinkError(msg)


def _as_tuple(row: Any, columns: list[str]) -> tuple[Any, ...]:
    if isinstance(row, Mapping):
        if missing := [c for c in columns if c not in row]:
            msg = f"expected a row with columns {columns}, found one without {missing}"
            raise SinkError(msg)
        return tuple(row[c] for c in columns)
    if isinstance(row, Sequence) and not isinstance(row, str | bytes):
        if len(row) != len(columns):
            msg = (
                f"expected rows of {len(columns)} values ({columns}), found {len(row)}: fix the job"
            )
            raise SinkError(msg)
        return tuple(row)
    msg = f"expected each row to be a tuple or a mapping, found {type(row).__name__}"
    raise SinkError(msg)


def _names(columns: list[str]) -> sql.Composed:
    return sql.SQL(", ").join(map(sql.Identifier, columns))


def _ident(name: str) -> sql.Identifier:
    """``table`` or ``schema.table`` as a quoted identifier."""
    parts = name.split(".")
    if len(parts) > 2 or not all(parts):
        msg = f"expected a table name like `table` or `schema.table`, found {name!r}"
        raise SinkError(msg)
    return sql.Identifier(*parts)


def _marker_sql(markers_table: str) -> tuple[sql.Composed, sql.Composed, sql.Composed]:
    """The marker table's DDL, its insert-unless-present and its read of one key's writer."""
    names = {"m": _ident(markers_table), "p": sql.Identifier("partition")}
    ddl = (
        "CREATE TABLE IF NOT EXISTS {m} (app text NOT NULL, output text NOT NULL, "
        "batch_time bigint NOT NULL, {p} integer NOT NULL, row_count bigint NOT NULL, "
        "writer text NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (app, output, batch_time, {p}))"
    )
    insert = (
        "INSERT INTO {m} (app, output, batch_time, {p}, row_count, writer) "
        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1"
    )
    read = "SELECT writer FROM {m} WHERE app = %s AND output = %s AND batch_time = %s AND {p} = %s"
    ddl_sql, insert_sql, read_sql = (sql.SQL(q).format(**names) for q in (ddl, insert, read))
    return ddl_sql, insert_sql, read_sql


def _tally_sql(tally_table: str) -> tuple[sql.Composed, sql.Composed]:
    """The tally table's DDL, and its add of (markers, rows) deleted before a batch."""
    names = {"f": _ident(tally_table)}
    ddl = (
        "CREATE TABLE IF NOT EXISTS {f} (app text NOT NULL, output text NOT NULL, "
        "markers bigint NOT NULL, row_count bigint NOT NULL, before_batch bigint NOT NULL, "
        "PRIMARY KEY (app, output))"
    )
    add = (
        "INSERT INTO {f} AS f (app, output, markers, row_count, before_batch) "
        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (app, output) DO UPDATE SET "
        "markers = f.markers + excluded.markers, row_count = f.row_count + excluded.row_count, "
        "before_batch = greatest(f.before_batch, excluded.before_batch)"
    )
    ddl_sql, add_sql = (sql.SQL(q).format(**names) for q in (ddl, add))
    return ddl_sql, add_sql


def _upsert(
    table: str, columns: list[str], key_columns: list[str], version: str | None = None
) -> sql.Composed:
    values = sql.SQL(", ").join(sql.Placeholder() * len(columns))
    # Only values change on conflict; a key-only table has nothing to update.
    updated = [c for c in columns if c not in key_columns]
    sets = [sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updated]
    action = sql.SQL("UPDATE SET ") + sql.SQL(", ").join(sets) if sets else sql.SQL("NOTHING")
    if sets and version is not None:
        # A row is replaced only by a higher version (an event window's next revision).
        newer = sql.SQL(" WHERE {t}.{v} < EXCLUDED.{v}")
        action += newer.format(t=_ident(table), v=sql.Identifier(version))
    stmt = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO {}")
    return stmt.format(_ident(table), _names(columns), values, _names(key_columns), action)


def _table_columns(conn: Conn, table: str) -> list[str]:
    """The table's columns in order; none if it does not exist."""
    query = (
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) "
        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
    )
    return [str(r[0]) for r in conn.execute(query, (_ident(table).as_string(conn),))]


def _fault(point: str, key: BatchKey, conn: Conn) -> None:
    if _fault_hook is not None:
        _fault_hook(point, key, conn.info.backend_pid)


def _connect(dsn: str) -> Conn:
    conn = psycopg.connect(dsn, connect_timeout=_CONNECT_TIMEOUT_S, application_name=_APP)
    conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
    return conn


# This process's and thread's connection per DSN: a thread's work must not share another's open
# transaction, and a forked child must not share its parent's socket.
_CONNECTIONS: ProcessCache[str, Conn] = ProcessCache(
    close=lambda conn: conn.close(),
    usable=lambda conn: not (conn.closed or conn.broken),
    per_thread=True,
)


def _connection(dsn: SecretStr) -> Conn:
    """This process's and thread's connection to `dsn`, opened (again) if needed."""
    secret = dsn.get_secret_value()
    return _CONNECTIONS.get(secret, lambda: _connect(secret))


def _drop_connection(dsn: SecretStr) -> None:
    _CONNECTIONS.evict(dsn.get_secret_value())


def _rollback_quietly(conn: Conn | None) -> None:
    """Leave a cached connection idle; a broken one is replaced on next use anyway."""
    try:
        if conn is not None:
            conn.rollback()
    except psycopg.Error:
        log.debug("rollback on a broken connection failed; it will be replaced")


def _is_connection_loss(error: psycopg.OperationalError) -> bool:
    state = error.sqlstate
    return state is None or state.startswith("08") or state in {"57P01", "57P02", "57P03"}


def _redact(text: str, dsn: SecretStr) -> str:
    """``text`` without the DSN or its password, which psycopg may echo in some errors."""
    secret = dsn.get_secret_value()
    secrets = [secret]
    try:
        secrets.append(str(conninfo_to_dict(secret).get("password") or ""))
    except psycopg.Error:
        pass  # an unparsable DSN is removed whole below
    for value in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(value, "***")
    return text
