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
  then truncates it: every record lands exactly once.

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
import threading
import time
import weakref
from collections.abc import Iterator
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
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine, make_url

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


def make_engine(db_url: str, connect_timeout: int = 3) -> Engine:
    """
    An engine for the trace database. SQLite: the parent folder is created, WAL journal, 30 s
    busy timeout, connections usable from any thread. PostgreSQL: pre-ping (a restarted server
    leaves dead pooled connections), a short connect timeout so an unreachable host fails fast.
    """
    url = make_url(normalize_url(db_url))
    if url.get_backend_name() == "sqlite":
        database = url.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
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
        connect_args["connect_timeout"] = connect_timeout
    engine = create_engine(url, pool_pre_ping=True, connect_args=connect_args)
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
    """INSERT ... ON CONFLICT (id) DO NOTHING of the dialect, built once (statements are immutable)."""
    module = sqlite if dialect == "sqlite" else postgresql
    return module.insert(tool_invocation).on_conflict_do_nothing(index_elements=["id"])


class TraceStore:
    """
    Writes `tool_invocation` rows, spools what the database cannot take, and reads rows back.

    Thread-safe: one instance may serve many threads. Writes to one SQLite file are serialized
    within the process; PostgreSQL writes run concurrently.
    """

    def __init__(self, db_url: str, spool_path: str, retry_interval: float = 5.0) -> None:
        """
        :param db_url: SQLAlchemy URL of the trace database.
        :param spool_path: The append-only JSONL spool for records the database could not take.
        :param retry_interval: After a failed write, seconds during which writes go straight to
            the spool instead of waiting on the database again (0 retries every time).
        """
        self.db_url = normalize_url(db_url)
        self.spool_path = Path(spool_path)
        self.lock_path = self.spool_path.with_name(self.spool_path.name + ".lock")
        self.retry_interval = retry_interval
        self._engine: Engine | None = None
        self._schema_ready = False
        self._setup_lock = threading.Lock()
        self._spool_thread_lock = threading.Lock()
        self._write_lock = self._lock_for(self.db_url)
        self._down_until = 0.0
        self._outage_warned = False

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
                    self._engine = make_engine(self.db_url)
        return self._engine

    def ensure_schema(self) -> None:
        """Create or migrate the schema once per store (raises when the database is away)."""
        if self._schema_ready:
            return
        engine = self.engine
        with self._write_lock, self._setup_lock:
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
                inserted += connection.execute(statement, row).rowcount or 0
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
        Record one invocation. Returns `recorded`, `spooled` (the database was unavailable) or
        `lost` (the spool file could not be written either). Never raises.
        """
        record = utf8_safe(record)
        if time.monotonic() < self._down_until:
            return self._spool(record)
        try:
            self.ensure_schema()
            with self._write_lock, self.engine.connect() as connection:
                if self._spool_pending():
                    self._replay_into(connection)  # older records first: the spool keeps call order
                self._insert(connection, [{**record, "trace_status": TRACE_RECORDED}])
                connection.commit()
        except Exception as exc:  # any database failure: keep the record locally, never fail the lookup
            self._mark_down(exc)
            return self._spool(record)
        self._mark_up()
        return TRACE_RECORDED

    def _mark_down(self, exc: BaseException) -> None:
        self._down_until = time.monotonic() + self.retry_interval
        if not self._outage_warned:
            self._outage_warned = True
            reason = first_line(exc)
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
        line = json.dumps(to_jsonable(record), ensure_ascii=False, default=str)
        try:
            with self._spool_lock(), open(self.spool_path, "a", encoding="utf-8") as spool:
                spool.write(line + "\n")
                spool.flush()
                os.fsync(spool.fileno())
        except OSError as exc:
            logger.error("Trace record %s lost: spool %s not writable (%s)", record.get("id"), self.spool_path, exc)
            return TRACE_LOST
        return TRACE_SPOOLED

    def _spool_pending(self) -> bool:
        try:
            return self.spool_path.stat().st_size > 0
        except OSError:
            return False

    def spooled(self) -> list[dict[str, Any]]:
        """The records waiting in the spool, oldest first."""
        return [from_jsonable(data) for data in self._read_spool()]

    def _read_spool(self) -> list[dict[str, Any]]:
        try:
            text = self.spool_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                # A torn last line (a crash mid-append) cannot be a whole record: skip it, loudly.
                logger.error("Spool %s line %d is not JSON; skipped", self.spool_path, number)
        return records

    def _replay_into(self, connection) -> int:
        """Insert the spool in order and commit, then truncate the spool (under its lock)."""
        with self._spool_lock():
            pending = self._read_spool()
            if not pending:
                return 0
            records = [{**from_jsonable(data), "trace_status": TRACE_REPLAYED} for data in pending]
            inserted = self._insert(connection, records)
            # Truncate only once the rows are committed: a failed commit leaves the spool intact,
            # and a crash between commit and truncation replays ids that are then skipped.
            connection.commit()
            with open(self.spool_path, "r+", encoding="utf-8") as spool:
                spool.truncate(0)
                os.fsync(spool.fileno())
        logger.info("Replayed %d spooled trace record(s) into %s (%d new)", len(records), redact(self.db_url), inserted)
        return inserted

    def replay(self) -> tuple[int, int]:
        """
        Replay the spool into the database now (`knowledge traces replay`).

        :returns: (records in the spool, rows newly inserted).
        :raises TraceStoreError: The database is still unavailable (the spool is left intact).
        """
        pending = len(self._read_spool())
        if not pending:
            return 0, 0
        try:
            self.ensure_schema()
            with self._write_lock, self.engine.connect() as connection:
                inserted = self._replay_into(connection)
        except Exception as exc:
            raise TraceStoreError(f"cannot replay into {redact(self.db_url)}: {first_line(exc)}") from exc
        self._mark_up()
        return pending, inserted

    # -- reading -------------------------------------------------------------------------------

    def _read(self, statement) -> list[dict[str, Any]]:
        try:
            self.ensure_schema()
            with self.engine.connect() as connection:
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
