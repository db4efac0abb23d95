"""
The trace database: its URL (any SQLAlchemy URL; `postgresql://` uses psycopg 3), its engines,
and the deadline of a call to a server database.

- SQLite: WAL, a busy timeout, and writes to one file serialized inside the process
  (`write_lock`), so concurrent threads never see "database is locked".
- PostgreSQL: pre-ping, a connect timeout and a `statement_timeout`, and a watchdog
  (`CallDeadline`) that cuts the connections of a call that gets no answer.
"""

import contextlib
import logging
import os
import socket
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError

from components.common.masking import masked
from components.errors import ParameterError

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0

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


def normalize_url(db_url: str) -> str:
    """`postgresql://` and `postgres://` use psycopg 3 (the driver installed), not psycopg2."""
    for prefix in ("postgresql://", "postgres://"):
        if db_url.startswith(prefix):
            return "postgresql+psycopg://" + db_url[len(prefix) :]
    return db_url


# The databases the trace store can write (SQLAlchemy URL schemes, before any `+driver`).
TRACE_DB_SCHEMES = ("sqlite", "postgresql", "postgres")


def check_trace_url(db_url: str) -> None:
    """A trace database URL the store can open: anything else would fail only at the first write or read."""
    scheme, separator, _rest = db_url.partition("://") if isinstance(db_url, str) else ("", "", "")
    if not separator or scheme.split("+", 1)[0] not in TRACE_DB_SCHEMES:
        shown = repr(redact(db_url) if isinstance(db_url, str) else db_url)
        raise ParameterError(
            "db_url", shown, "is not a database URL: give sqlite:///PATH or postgresql://USER@HOST:PORT/DB"
        )


def redact(db_url: str) -> str:
    """The URL with any password hidden, for messages."""
    return masked(db_url)


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


def write_lock(db_url: str) -> Any:
    """The lock writes to this database take inside the process: one per SQLite file, none for a server."""
    try:
        url = make_url(db_url)
    except Exception:
        return contextlib.nullcontext()
    if url.get_backend_name() != "sqlite":
        return contextlib.nullcontext()
    key = os.path.abspath(url.database or ":memory:")
    with _sqlite_locks_guard:
        return _sqlite_locks.setdefault(key, threading.Lock())


def make_engine(db_url: str, connect_timeout: float = DEFAULT_TIMEOUT_S) -> Engine:
    """
    An engine for the trace database. SQLite: the parent folder is created, WAL journal, 30 s
    busy timeout, connections usable from any thread. PostgreSQL: pre-ping (a restarted server
    leaves dead pooled connections), a connect timeout so an unreachable host fails fast, and a
    `statement_timeout` of the same length for a server that is slow to answer.
    """
    url = make_url(normalize_url(db_url))
    engine = _sqlite_engine(db_url, url) if url.get_backend_name() == "sqlite" else _server_engine(url, connect_timeout)
    _engines.add(engine)
    return engine


def _sqlite_engine(db_url: str, url) -> Engine:
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

    return engine


def _server_engine(url, connect_timeout: float) -> Engine:
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

    return engine


class RefusedRecord(ValueError):
    """A record the store itself refuses for its content (e.g. a label of an invocation that is not there)."""


def is_content_error(exc: BaseException) -> bool:
    """
    Whether the database refused the record itself (bad data, a constraint), as opposed to being
    unavailable: such a record would fail again on every replay.
    """
    if isinstance(exc, (DataError, IntegrityError, RefusedRecord)):
        return True
    # Raised while binding parameters, before anything reached the database (e.g. a NUL in text).
    return isinstance(exc, StatementError) and not isinstance(exc, DBAPIError)


class CallDeadline:
    """
    Bounds each call to a server database: one that accepted the connection but no longer answers
    (a stalled host, a frozen proxy) would block the driver's read for good. When the deadline
    passes, the sockets of the watched engine's connections are shut down, the read fails, and
    the caller spools; `timed_out` then tells why.
    """

    def __init__(self, timeout_s: float, db_label: str) -> None:
        """
        :param timeout_s: Longest wait for one call; 0 waits as long as the driver does.
        :param db_label: The database as named in the log (its URL without the password).
        """
        self.timeout_s = timeout_s
        self.db_label = db_label
        self.timed_out = False
        self._watching = False
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()

    def watch(self, engine: Engine) -> None:
        """Track the connections of a server engine (a SQLite file never stalls a read)."""
        if engine.dialect.name != "sqlite":
            event.listen(engine, "connect", self._track_connection)
            self._watching = True

    def _track_connection(self, dbapi_connection, _record) -> None:
        with contextlib.suppress(TypeError):  # a driver connection without weak references
            self._connections.add(dbapi_connection)

    @contextlib.contextmanager
    def bound(self) -> Iterator[None]:
        """Run the block under the deadline."""
        if not self.timeout_s or not self._watching:
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
        self.timed_out = True
        logger.debug("Trace database %s gave no answer within %.1f s: connections cut", self.db_label, self.timeout_s)
        for connection in list(self._connections):
            # A connection already closed has nothing to cut.
            with contextlib.suppress(Exception), socket.socket(fileno=os.dup(connection.fileno())) as sock:
                sock.shutdown(socket.SHUT_RDWR)
