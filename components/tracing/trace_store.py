"""
The `tool_invocation` table, its database, and the local spool that keeps records while the
database is away.

- Any SQLAlchemy URL: SQLite by default (WAL, a busy timeout and serialized writes inside the
  process, so concurrent threads never see "database is locked"), PostgreSQL by URL
  (`retrieval_details` as JSONB).
- The schema is created and migrated with Alembic (`components/tracing/migrations`), run in code;
  the revision is recorded in the `lookup_knowledge_schema_version` table (a name of its own, so
  the trace table may share a database with MLflow's store, which has its own `alembic_version`).
- `write(record)` never raises: when the database cannot take the row, the record is appended
  to a JSONL spool (under an fcntl lock) and `"spooled"` is returned. The next successful write,
  or `replay()`, inserts the spool in order with an insert that ignores ids already present,
  then truncates it: every record lands exactly once. Each spooled record names its database
  (`target_key`: the URL without credentials) and is replayed only into that one.
- A record the database rejects for its content (not for being away) goes to the dead-letter
  file beside the spool (`<spool>.dead.jsonl`, with the reason) instead of blocking the queue;
  so does the torn tail of a spool line cut by a crash.
- Every database call of a server database has a deadline (`timeout_s`): connect timeout,
  `statement_timeout`, and a watchdog that cuts the connections of a call that gets no answer.

Usage example:

```python
store = TraceStore("sqlite:///.knowledge/traces.db", ".knowledge/trace-spool.jsonl")
status = store.write({"id": "...", "tool_name": "lookup_knowledge", "status": "ok", ...})
store.list(last=10)
```
"""

import contextlib
import fcntl
import functools
import json
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError

from components.common.text import printable
from components.errors import KnowledgeFailure, first_line

logger = logging.getLogger(__name__)

TABLE_NAME = "tool_invocation"
VERSION_TABLE = "lookup_knowledge_schema_version"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

# What a lookup returns in `traceStatus` and what a row keeps in `trace_status`.
TRACE_RECORDED = "recorded"  # the row is in the database
TRACE_SPOOLED = "spooled"  # the database was unavailable; the record waits in the spool
TRACE_REPLAYED = "replayed"  # (rows only) the record reached the database from the spool
TRACE_LOST = "lost"  # neither the database nor the spool file could take it (logged as an error)
TRACE_REJECTED = "rejected"  # the database refused the record's content: it is in the dead-letter file

# The spooled record's key naming the database it is meant for (see `target_key`).
TARGET_FIELD = "_target"
DEFAULT_TIMEOUT_S = 5.0

STATUS_OK = "ok"
STATUS_ERROR = "error"

JSON_VARIANT = JSON().with_variant(postgresql.JSONB(), "postgresql")

metadata = MetaData()
tool_invocation = Table(
    TABLE_NAME,
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tool_name", String(64), nullable=False),
    Column("arguments", JSON_VARIANT, nullable=True),
    Column("status", String(16), nullable=False),
    Column("found", Boolean, nullable=True),
    Column("retrieval_layer", String(16), nullable=True),
    Column("latency_ms", Float, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("error", Text, nullable=True),
    Column("retrieval_details", JSON_VARIANT, nullable=True),
    Column("trace_status", String(16), nullable=True),
    Index("ix_tool_invocation_created_at", "created_at"),
    Index("ix_tool_invocation_status", "status"),
)
COLUMNS = [c.name for c in tool_invocation.columns]

# One lock per SQLite file in this process: SQLite takes one writer at a time, and waiting on a
# Python lock is cheaper and more predictable than SQLite's busy-retry loop.
_sqlite_locks: dict[str, threading.Lock] = {}
_sqlite_locks_guard = threading.Lock()


# Every engine made here, so tests (and a server shutting down) can close their pooled connections.
_engines: "weakref.WeakSet[Engine]" = weakref.WeakSet()


def dispose_engines() -> None:
    """Close the pooled connections of every trace-store engine of the process."""
    for engine in list(_engines):
        engine.dispose()


class TraceStoreError(KnowledgeFailure):
    """The trace database cannot be read (wrong URL, server down): for the review commands."""


def normalize_url(db_url: str) -> str:
    """`postgresql://` and `postgres://` use psycopg 3 (the driver installed), not psycopg2."""
    for prefix in ("postgresql://", "postgres://"):
        if db_url.startswith(prefix):
            return "postgresql+psycopg://" + db_url[len(prefix) :]
    return db_url


def redact(db_url: str) -> str:
    """The URL with any password hidden, for messages."""
    try:
        return make_url(db_url).render_as_string(hide_password=True)
    except Exception:  # not a URL at all: nothing to hide worth a crash
        return db_url


def target_key(db_url: str) -> str:
    """The database a spooled record is meant for: its URL without user and password."""
    try:
        url = make_url(normalize_url(db_url))
    except Exception:  # not a URL: the text itself names it
        return db_url
    return url._replace(username=None, password=None).render_as_string(hide_password=False)


def sqlite_path(db_url: str) -> Path | None:
    """The file of a SQLite database URL (None for other databases, in-memory and `file:` URIs)."""
    url = make_url(normalize_url(db_url))
    database = url.database or ""
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).expanduser()


def make_engine(db_url: str, connect_timeout: float = DEFAULT_TIMEOUT_S) -> Engine:
    """
    An engine for the trace database. SQLite: the parent folder is created, WAL journal, 30 s
    busy timeout, connections usable from any thread. PostgreSQL: pre-ping (a restarted server
    leaves dead pooled connections), a connect timeout so an unreachable host fails fast, and a
    `statement_timeout` of the same length for a server that is slow to answer.
    """
    url = make_url(normalize_url(db_url))
    if url.get_backend_name() == "sqlite":
        path = sqlite_path(db_url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        _engines.add(engine)
        return engine
    connect_args: dict[str, Any] = {}
    if url.get_backend_name() == "postgresql":
        connect_args["connect_timeout"] = max(1, round(connect_timeout))
    engine = create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    if url.get_backend_name() == "postgresql":
        statement_ms = max(1, int(connect_timeout * 1000))

        @event.listens_for(engine, "connect")
        def _statement_timeout(dbapi_connection, _record):
            # Set per connection, not through `options`, which the URL may already use (search_path).
            with dbapi_connection.cursor() as cursor:
                cursor.execute(f"SET statement_timeout = {statement_ms}")
            dbapi_connection.commit()

    _engines.add(engine)
    return engine


def alembic_config(connection) -> "Any":
    """An Alembic Config built in code (no alembic.ini): our script folder, our version table."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    config.attributes["version_table"] = VERSION_TABLE
    return config


def upgrade_schema(engine: Engine, revision: str = "head") -> None:
    """Create or migrate the `tool_invocation` schema to `revision` (idempotent)."""
    from alembic import command

    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Workers starting together would each create the tables (a duplicate-type error in one of
            # them): the first migrates, the others wait for its commit and find the schema at head.
            connection.execute(text("SELECT pg_advisory_xact_lock(hashtext('lookup-knowledge schema'))"))
        command.upgrade(alembic_config(connection), revision)


def schema_revision(engine: Engine) -> str | None:
    """The revision recorded in the database (None before the first migration)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def head_revision() -> str:
    """The newest revision of the migrations shipped with this code."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config(None)).get_current_head()  # type: ignore[return-value]


def utf8_safe(value: Any) -> Any:
    """
    A value whose strings can be written as UTF-8: a query can carry lone surrogates (a JSON
    `\\ud800`), which SQLite, PostgreSQL, the spool and the terminal all refuse. A value without
    any comes back as is: one C-level serialization finds out, instead of a walk in Python.
    """
    if _encodes_as_utf8(value):
        return value
    return _replace_surrogates(value)


def _encodes_as_utf8(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False, default=repr).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError):  # ValueError: a circular structure
        return False
    return True


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replace_surrogates(v) for v in value]
    return value


def without_nul(value: Any) -> Any:
    """
    A value without NUL characters: PostgreSQL refuses them in text and JSONB (`\\u0000`), so
    each one is stored as the six characters `\\u0000` (the query stays readable, and one record
    with a NUL cannot block the others). A value without any comes back as is.
    """
    if "\\u0000" not in json.dumps(value, default=str):
        return value
    return _replace_nul(value)


def _replace_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\\u0000")
    if isinstance(value, dict):
        return {_replace_nul(k): _replace_nul(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replace_nul(v) for v in value]
    return value


def is_content_error(exc: BaseException) -> bool:
    """
    Whether the database refused the record itself (bad data, a constraint), as opposed to being
    unavailable: such a record would fail again on every replay.
    """
    if isinstance(exc, (DataError, IntegrityError)):
        return True
    # Raised while binding parameters, before anything reached the database (e.g. a NUL in text).
    return isinstance(exc, StatementError) and not isinstance(exc, DBAPIError)


@dataclass(frozen=True)
class ReplayReport:
    """What one replay did: spooled records for this database, rows new, records dead-lettered, kept."""

    pending: int = 0
    inserted: int = 0
    rejected: int = 0
    kept_for_others: int = 0
    torn: int = 0

    @property
    def already_present(self) -> int:
        return self.pending - self.inserted - self.rejected


def to_jsonable(record: dict[str, Any]) -> dict[str, Any]:
    """A record as JSON (created_at in ISO 8601), for the spool and `traces export`."""
    data = dict(record)
    created = data.get("created_at")
    if isinstance(created, datetime):
        if created.tzinfo is None:
            created = created.replace(tzinfo=UTC)
        data["created_at"] = created.isoformat()
    return data


def from_jsonable(data: dict[str, Any]) -> dict[str, Any]:
    record = {key: data.get(key) for key in COLUMNS}
    created = record.get("created_at")
    if isinstance(created, str):
        record["created_at"] = datetime.fromisoformat(created)
    return record


@functools.cache
def _insert_ignoring_duplicates(dialect: str) -> Any:
    """INSERT ... ON CONFLICT (id) DO NOTHING RETURNING id of the dialect, built once (statements are immutable)."""
    module = sqlite if dialect == "sqlite" else postgresql
    return module.insert(tool_invocation).on_conflict_do_nothing(index_elements=["id"]).returning(tool_invocation.c.id)


class TraceStore:
    """
    Writes `tool_invocation` rows, spools what the database cannot take, and reads rows back.

    Thread-safe: one instance may serve many threads. Writes to one SQLite file are serialized
    within the process; PostgreSQL writes run concurrently.
    """

    def __init__(
        self, db_url: str, spool_path: str, retry_interval: float = 5.0, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        """
        :param db_url: SQLAlchemy URL of the trace database.
        :param spool_path: The append-only JSONL spool for records the database could not take.
        :param retry_interval: After a failed write, seconds during which writes go straight to
            the spool instead of waiting on the database again (0 retries every time).
        :param timeout_s: Longest wait on a server database for one call (connect, statement,
            answer) before the record is spooled; 0 waits as long as the driver does.
        """
        if timeout_s < 0:
            raise ValueError(f"timeout_s must be >= 0, not {timeout_s}")
        self.db_url = normalize_url(db_url)
        self.target = target_key(db_url)
        self.spool_path = Path(spool_path)
        self.lock_path = self.spool_path.with_name(self.spool_path.name + ".lock")
        self.dead_letter_path = self.spool_path.with_name(self.spool_path.stem + ".dead.jsonl")
        self.retry_interval = retry_interval
        self.timeout_s = timeout_s
        self._engine: Engine | None = None
        self._schema_ready = False
        self._setup_lock = threading.Lock()
        self._spool_thread_lock = threading.Lock()
        self._write_lock = self._lock_for(self.db_url)
        self._down_until = 0.0
        self._outage_warned = False
        # (size, mtime) of a spool that holds only other databases' records: nothing to replay here.
        self._foreign_spool: tuple[int, int] | None = None
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._timed_out = False

    # -- database ------------------------------------------------------------------------------

    @staticmethod
    def _lock_for(db_url: str) -> Any:
        try:
            url = make_url(db_url)
        except Exception:
            return contextlib.nullcontext()
        if url.get_backend_name() != "sqlite":
            return contextlib.nullcontext()
        key = os.path.abspath(url.database or ":memory:")
        with _sqlite_locks_guard:
            return _sqlite_locks.setdefault(key, threading.Lock())

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            with self._setup_lock:
                if self._engine is None:
                    engine = make_engine(self.db_url, connect_timeout=self.timeout_s or DEFAULT_TIMEOUT_S)
                    if engine.dialect.name != "sqlite":
                        event.listen(engine, "connect", self._track_connection)
                    self._engine = engine
        return self._engine

    def _track_connection(self, dbapi_connection, _record) -> None:
        with contextlib.suppress(TypeError):  # a driver connection without weak references
            self._connections.add(dbapi_connection)

    @contextlib.contextmanager
    def _deadline(self) -> Iterator[None]:
        """
        Bound one database call: a server that accepted the connection but no longer answers
        (a stalled host, a frozen proxy) would block the driver's read for good. When the
        deadline passes, the sockets of this store's connections are shut down, the read fails,
        and the caller spools.
        """
        if not self.timeout_s or self.engine.dialect.name == "sqlite":
            yield
            return
        timer = threading.Timer(self.timeout_s, self._cut_connections)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _cut_connections(self) -> None:
        self._timed_out = True
        logger.debug(
            "Trace database %s gave no answer within %.1f s: connections cut", redact(self.db_url), self.timeout_s
        )
        for connection in list(self._connections):
            # A connection already closed has nothing to cut.
            with contextlib.suppress(Exception), socket.socket(fileno=os.dup(connection.fileno())) as sock:
                sock.shutdown(socket.SHUT_RDWR)

    def ensure_schema(self) -> None:
        """Create or migrate the schema once per store (raises when the database is away)."""
        if self._schema_ready:
            return
        engine = self.engine
        with self._write_lock, self._setup_lock, self._deadline():
            if not self._schema_ready:
                upgrade_schema(engine)
                self._schema_ready = True

    def _insert(self, connection, records: list[dict[str, Any]]) -> int:
        """Insert records, skipping ids already present; returns how many were new."""
        if not records:
            return 0
        rows = [{key: record.get(key) for key in COLUMNS} for record in records]
        dialect = connection.dialect.name
        if dialect in ("sqlite", "postgresql"):
            statement = _insert_ignoring_duplicates(dialect)
            inserted = 0
            for row in rows:  # one statement per row keeps the spool order and counts the new ones
                # RETURNING counts the new row: psycopg reports rowcount -1 for this statement.
                inserted += len(connection.execute(statement, row).fetchall())
            return inserted
        existing = set(
            connection.execute(select(tool_invocation.c.id).where(tool_invocation.c.id.in_([r["id"] for r in rows])))
            .scalars()
            .all()
        )
        fresh = [r for r in rows if r["id"] not in existing]
        if fresh:
            connection.execute(insert(tool_invocation), fresh)
        return len(fresh)

    # -- writing -------------------------------------------------------------------------------

    def write(self, record: dict[str, Any]) -> str:
        """
        Record one invocation. Returns `recorded`, `spooled` (the database was unavailable),
        `rejected` (the database refused the content: the record is in the dead-letter file) or
        `lost` (no file could take it either). Never raises.
        """
        record = without_nul(utf8_safe(record))
        if time.monotonic() < self._down_until:
            return self._spool(record)
        try:
            self.ensure_schema()
            with self._write_lock, self._deadline(), self.engine.connect() as connection:
                if self._spool_pending():
                    self._replay_into(connection)  # older records first: the spool keeps call order
                try:
                    self._insert(connection, [{**record, "trace_status": TRACE_RECORDED}])
                    connection.commit()
                except Exception as exc:
                    if not is_content_error(exc):
                        raise
                    connection.rollback()
                    return self._dead_letter([to_jsonable(record)], first_line(exc))
        except Exception as exc:  # any database failure: keep the record locally, never fail the lookup
            self.mark_down(exc)
            return self._spool(record)
        self._mark_up()
        return TRACE_RECORDED

    def mark_down(self, exc: BaseException) -> None:
        """Note that the database is unavailable: warn once per outage, spool for `retry_interval`."""
        self._down_until = time.monotonic() + self.retry_interval
        reason = first_line(exc)
        if self._timed_out:
            self._timed_out = False
            reason = f"no answer within {self.timeout_s:g} s (trace.timeout_s)"
        if not self._outage_warned:
            self._outage_warned = True
            logger.warning(
                "Trace database %s unavailable (%s): records go to the spool %s and are replayed on the next "
                "successful write or by `knowledge traces replay`",
                redact(self.db_url),
                reason,
                self.spool_path,
            )

    def _mark_up(self) -> None:
        if self._outage_warned:
            logger.warning("Trace database %s is back: spooled records replayed", redact(self.db_url))
        self._outage_warned = False
        self._down_until = 0.0

    @contextlib.contextmanager
    def _spool_lock(self) -> Iterator[None]:
        """Exclusive use of the spool: a thread lock, and an fcntl lock for other processes."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        with self._spool_thread_lock, open(self.lock_path, "a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _spool(self, record: dict[str, Any]) -> str:
        data = {**to_jsonable(record), TARGET_FIELD: self.target}
        try:
            with self._spool_lock():
                _append_lines(self.spool_path, [json.dumps(data, ensure_ascii=False, default=str)])
        except OSError as exc:
            logger.error("Trace record %s lost: spool %s not writable (%s)", record.get("id"), self.spool_path, exc)
            return TRACE_LOST
        return TRACE_SPOOLED

    def _dead_letter(self, entries: list[dict[str, Any]], reason: str) -> str:
        """Keep records (or torn spool text) the database will never take, with the reason."""
        now = datetime.now(tz=UTC).isoformat()
        lines = [json.dumps({"reason": reason, "at": now, **e}, ensure_ascii=False, default=str) for e in entries]
        try:
            _append_lines(self.dead_letter_path, lines)
        except OSError as exc:
            logger.error("%d trace record(s) lost: %s not writable (%s)", len(entries), self.dead_letter_path, exc)
            return TRACE_LOST
        logger.error(
            "%d trace record(s) refused by %s, kept in %s: %s",
            len(entries),
            redact(self.db_url),
            self.dead_letter_path,
            reason,
        )
        return TRACE_REJECTED

    def _spool_pending(self) -> bool:
        try:
            stat = self.spool_path.stat()
        except OSError:
            return False
        return stat.st_size > 0 and (stat.st_size, stat.st_mtime_ns) != self._foreign_spool

    def spooled(self) -> list[dict[str, Any]]:
        """The records waiting in the spool for this database, oldest first."""
        records, _torn = self._read_spool()
        return [from_jsonable(data) for data in records if self._is_ours(data)]

    def _is_ours(self, data: dict[str, Any]) -> bool:
        # A record spooled before targets were recorded belongs to whichever database replays it.
        return data.get(TARGET_FIELD, self.target) == self.target

    def _read_spool(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The spool's records, and the torn fragments (a crash mid-append) found between them."""
        try:
            text = self.spool_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return [], []
        records: list[dict[str, Any]] = []
        torn: list[str] = []
        for line in text.splitlines():
            if line.strip():
                found, fragment = _parse_spool_line(line)
                records += found
                if fragment:
                    torn.append(fragment)
        return records, torn

    def _replay_into(self, connection) -> ReplayReport:
        """
        Insert this database's spooled records in order and commit, then rewrite the spool with
        only the other databases' records (under its lock). Records the database refuses for
        their content, and torn fragments, go to the dead-letter file.
        """
        with self._spool_lock():
            records, torn = self._read_spool()
            ours = [data for data in records if self._is_ours(data)]
            others = [data for data in records if not self._is_ours(data)]
            if not ours and not torn:
                self._remember_foreign_spool()
                return ReplayReport(kept_for_others=len(others))
            inserted, rejected = self._insert_replayed(connection, ours)
            if torn:
                self._dead_letter([{"torn_line": fragment} for fragment in torn], "torn spool line (incomplete write)")
            # Rewrite only once the rows are committed: a failed commit leaves the spool intact,
            # and a crash between commit and rewrite replays ids that are then skipped.
            _rewrite_lines(self.spool_path, [json.dumps(d, ensure_ascii=False, default=str) for d in others])
            self._remember_foreign_spool()
        report = ReplayReport(len(ours), inserted, rejected, len(others), len(torn))
        logger.info("Replayed spooled trace records into %s: %s", redact(self.db_url), report)
        if others:
            logger.warning(
                "%d spooled trace record(s) are meant for other trace databases and stay in %s",
                len(others),
                self.spool_path,
            )
        return report

    def _insert_replayed(self, connection, pending: list[dict[str, Any]]) -> tuple[int, int]:
        """(rows new, records dead-lettered): in one transaction, or one by one when a record is refused."""
        pending, records, rejected = self._readable_records(pending)
        try:
            inserted = self._insert(connection, records)
            connection.commit()
            return inserted, rejected
        except Exception as exc:
            if not is_content_error(exc):
                raise
            connection.rollback()
        inserted = 0
        for data, row in zip(pending, records, strict=True):
            try:
                inserted += self._insert(connection, [row])
                connection.commit()
            except Exception as exc:
                if not is_content_error(exc):
                    raise
                connection.rollback()
                self._dead_letter([data], first_line(exc))
                rejected += 1
        return inserted, rejected

    def _readable_records(
        self, pending: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        """
        (spooled data, rows) of the records that convert to rows, and how many did not: a value no
        database can take (e.g. `created_at: "never"`) goes to the dead-letter file with the reason
        instead of failing the replay, which would stop every later record at the same line.
        """
        kept: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []
        rejected = 0
        for data in pending:
            try:
                row = {**from_jsonable(without_nul(data)), "trace_status": TRACE_REPLAYED}
            except (TypeError, ValueError) as exc:
                self._dead_letter([data], f"unreadable spooled record: {first_line(exc)}")
                rejected += 1
                continue
            kept.append(data)
            rows.append(row)
        return kept, rows, rejected

    def _remember_foreign_spool(self) -> None:
        try:
            stat = self.spool_path.stat()
        except OSError:
            self._foreign_spool = None
            return
        self._foreign_spool = (stat.st_size, stat.st_mtime_ns) if stat.st_size else None

    def replay(self) -> ReplayReport:
        """
        Replay the spool into the database now (`knowledge traces replay`).

        :raises TraceStoreError: The database is still unavailable (the spool is left intact).
        """
        if not self._spool_pending():
            records, _torn = self._read_spool()
            return ReplayReport(kept_for_others=sum(not self._is_ours(d) for d in records))
        try:
            self.ensure_schema()
            with self._write_lock, self._deadline(), self.engine.connect() as connection:
                report = self._replay_into(connection)
        except Exception as exc:
            raise TraceStoreError(f"cannot replay into {redact(self.db_url)}: {first_line(exc)}") from exc
        self._mark_up()
        return report

    # -- reading -------------------------------------------------------------------------------

    def _read(self, statement) -> list[dict[str, Any]]:
        try:
            self.ensure_schema()
            with self._deadline(), self.engine.connect() as connection:
                return [dict(row._mapping) for row in connection.execute(statement)]
        except TraceStoreError:
            raise
        except Exception as exc:
            raise TraceStoreError(f"cannot read traces from {redact(self.db_url)}: {first_line(exc)}") from exc

    def latest(self, last: int | None = 20, status: str | None = None) -> list[dict[str, Any]]:
        """The latest rows, newest first."""
        statement = select(tool_invocation).order_by(tool_invocation.c.created_at.desc(), tool_invocation.c.id)
        if status:
            statement = statement.where(tool_invocation.c.status == status)
        if last:
            statement = statement.limit(last)
        return self._read(statement)

    def get(self, invocation_id: str) -> dict[str, Any] | None:
        """One row by id, or by a unique id prefix of at least 6 characters."""
        rows = self._read(select(tool_invocation).where(tool_invocation.c.id == invocation_id))
        if not rows and len(invocation_id) >= 6:
            rows = self._read(
                select(tool_invocation).where(tool_invocation.c.id.startswith(invocation_id, autoescape=True)).limit(2)
            )
            if len(rows) > 1:
                raise TraceStoreError(f"invocation id prefix {invocation_id!r} is ambiguous: give more characters")
        return rows[0] if rows else None

    def iter_all(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every row, oldest first."""
        statement = select(tool_invocation).order_by(tool_invocation.c.created_at, tool_invocation.c.id)
        if status:
            statement = statement.where(tool_invocation.c.status == status)
        return self._read(statement)

    def count(self) -> int:
        return self._read(select(func.count().label("n")).select_from(tool_invocation))[0]["n"]

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()


def _append_lines(path: Path, lines: list[str]) -> None:
    """
    Append whole lines and fsync. A file whose last line was torn by a crash mid-append gets a
    newline first, so the torn part stays alone on its line and the new record stays whole.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab+") as handle:
        handle.seek(0, os.SEEK_END)
        prefix = b""
        if handle.tell() > 0:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                prefix = b"\n"
        handle.write(prefix + "".join(line + "\n" for line in lines).encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())


def _rewrite_lines(path: Path, lines: list[str]) -> None:
    """Replace the file's content with `lines` (truncated to empty when there are none), fsynced."""
    with open(path, "r+", encoding="utf-8") as handle:
        handle.truncate(0)
        handle.write("".join(line + "\n" for line in lines))
        handle.flush()
        os.fsync(handle.fileno())


def _parse_spool_line(line: str) -> tuple[list[dict[str, Any]], str | None]:
    """
    The records of one spool line and its torn fragment, if any. A line written before appends
    started on a fresh line may hold a torn record with a whole one glued to its end: the whole
    one is recovered, only the torn part is returned as the fragment.
    """
    try:
        data = json.loads(line)
        return ([data], None) if isinstance(data, dict) else ([], line)
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    start = line.find('{"id"', 1)
    while start != -1:
        try:
            data, end = decoder.raw_decode(line, start)
        except json.JSONDecodeError:
            data, end = None, -1
        if isinstance(data, dict) and end == len(line):
            return [data], line[:start]
        start = line.find('{"id"', start + 1)
    return [], line
