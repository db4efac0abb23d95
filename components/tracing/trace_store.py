"""
The `tool_invocation` and `lookup_label` store: writes rows, keeps what the database cannot take in the spool,
replays it, and reads rows back for the review commands.

- Any SQLAlchemy URL: SQLite by default, PostgreSQL by URL (`components.tracing.trace_database`).
  The schema is created or migrated on first use (`components.tracing.trace_schema`).
- `write(record)` never raises: when the database cannot take the row, the record is appended
  to the spool (`components.tracing.trace_spool`) and `"spooled"` is returned. The next
  successful write, or `replay()`, inserts the spool in order, exactly once
  (`components.tracing.trace_replay`).
- Every database call of a server database has a deadline (`timeout_s`): connect timeout,
  `statement_timeout`, and a watchdog that cuts the connections of a call that gets no answer.

Usage example:

```python
store = TraceStore("sqlite:///.knowledge/traces.db", ".knowledge/trace-spool.jsonl")
status = store.write({"id": "...", "tool_name": "lookup_knowledge", "status": "ok", ...})
store.latest(last=10)
```
"""

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from components.common.choices import check_at_least, check_flags, check_named
from components.errors import KnowledgeFailure, first_line
from components.tracing.label_records import insert_labels, spooled_label
from components.tracing.trace_database import (
    DEFAULT_TIMEOUT_S,
    CallDeadline,
    check_trace_url,
    is_content_error,
    make_engine,
    normalize_url,
    redact,
    target_key,
    write_lock,
)
from components.tracing.trace_records import (
    TRACE_RECORDED,
    insert_records,
    to_jsonable,
    utf8_safe,
    without_nul,
)
from components.tracing.trace_replay import ReplayReport, replay_into
from components.tracing.trace_schema import (
    TraceSchemaError,
    check_readable,
    lookup_label,
    tool_invocation,
    upgrade_schema,
)
from components.tracing.trace_spool import TraceSpool

logger = logging.getLogger(__name__)


class TraceStoreError(KnowledgeFailure):
    """The trace database cannot be read (wrong URL, server down): for the review commands."""


class AmbiguousInvocationIdError(TraceStoreError):
    """An id prefix that more than one invocation starts with."""


class TraceStore:
    """
    Writes `tool_invocation` rows, spools what the database cannot take, and reads rows back.

    Thread-safe: one instance may serve many threads. Writes to one SQLite file are serialized
    within the process; PostgreSQL writes run concurrently.
    """

    def __init__(
        self,
        db_url: str,
        spool_path: str,
        retry_interval: float = 5.0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        read_only: bool = False,
    ) -> None:
        """
        :param db_url: SQLAlchemy URL of the trace database.
        :param spool_path: The append-only JSONL spool for records the database could not take.
        :param retry_interval: After a failed write, seconds during which writes go straight to
            the spool instead of waiting on the database again (0 retries every time).
        :param timeout_s: Longest wait on a server database for one call (connect, statement,
            answer) before the record is spooled; 0 waits as long as the driver does.
        :param read_only: Reads only (the review commands): the schema is checked, never created
            or migrated, and a database not at this code's revision is refused.
        """
        check_trace_url(db_url)
        check_named(spool_path=spool_path)
        check_at_least(0, retry_interval=retry_interval, timeout_s=timeout_s)
        check_flags(read_only=read_only)
        self.db_url = normalize_url(db_url)
        self.target = target_key(db_url)
        self.spool = TraceSpool(spool_path, self.target, redact(self.db_url))
        self.spool_path = self.spool.path
        self.dead_letter_path = self.spool.dead_letter_path
        self.retry_interval = retry_interval
        self.timeout_s = timeout_s
        self._engine: Engine | None = None
        self._schema_ready = False
        self.read_only = read_only
        self._setup_lock = threading.Lock()
        self._write_lock = write_lock(self.db_url)
        self._calls = CallDeadline(timeout_s, redact(self.db_url))
        self._down_until = 0.0
        self._outage_warned = False

    # -- database ------------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            with self._setup_lock:
                if self._engine is None:
                    engine = make_engine(self.db_url, connect_timeout=self.timeout_s or DEFAULT_TIMEOUT_S)
                    self._calls.watch(engine)
                    self._engine = engine
        return self._engine

    def ensure_schema(self) -> None:
        """
        Create or migrate the schema once per store, or only check it when `read_only` (raises when
        the database is away, `TraceSchemaError` when it is newer than this code or damaged).
        """
        if self._schema_ready:
            return
        engine = self.engine
        with self._write_lock, self._setup_lock, self._calls.bound():
            if not self._schema_ready:
                if self.read_only:
                    check_readable(engine)
                else:
                    upgrade_schema(engine)
                self._schema_ready = True

    # -- writing -------------------------------------------------------------------------------

    def write(self, record: dict[str, Any]) -> str:
        """
        Record one invocation. Returns `recorded`, `spooled` (the database was unavailable),
        `rejected` (the database refused the content: the record is in the dead-letter file) or
        `lost` (no file could take it either). Never raises.
        """
        record = without_nul(utf8_safe(record))
        return self._write(record, lambda c: insert_records(c, [{**record, "trace_status": TRACE_RECORDED}]), record)

    def write_label(self, label: dict[str, Any]) -> str:
        """
        Record one label (`components.tracing.label_records`): the same statuses as `write`, the same
        spool; a label of an invocation the database does not hold is `rejected`. Never raises.
        """
        label = without_nul(utf8_safe(label))
        return self._write(label, lambda c: insert_labels(c, [label]), spooled_label(label))

    def _write(self, record: dict[str, Any], insert: Callable[[Any], int], spooled: dict[str, Any]) -> str:
        if time.monotonic() < self._down_until:
            return self.spool.append(spooled)
        try:
            self.ensure_schema()
            with self._write_lock, self._calls.bound(), self.engine.connect() as connection:
                if self.spool.pending():
                    replay_into(connection, self.spool)  # older records first: the spool keeps call order
                try:
                    insert(connection)
                    connection.commit()
                except Exception as exc:
                    if not is_content_error(exc):
                        raise
                    connection.rollback()
                    return self.spool.dead_letter([to_jsonable(spooled)], first_line(exc))
        except Exception as exc:  # any database failure: keep the record locally, never fail the caller
            self.mark_down(exc)
            return self.spool.append(spooled)
        self._mark_up()
        return TRACE_RECORDED

    def mark_down(self, exc: BaseException) -> None:
        """Note that the database is unavailable: warn once per outage, spool for `retry_interval`."""
        self._down_until = time.monotonic() + self.retry_interval
        reason = first_line(exc)
        if self._calls.timed_out:
            self._calls.timed_out = False
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

    def spooled(self) -> list[dict[str, Any]]:
        """The records waiting in the spool for this database, oldest first."""
        return self.spool.ours()

    def replay(self) -> ReplayReport:
        """
        Replay the spool into the database now (`knowledge traces replay`).

        :raises TraceStoreError: The database is still unavailable (the spool is left intact).
        """
        if not self.spool.pending():
            records, _torn = self.spool.read()
            return ReplayReport(kept_for_others=sum(not self.spool.is_ours(d) for d in records))
        try:
            self.ensure_schema()
            with self._write_lock, self._calls.bound(), self.engine.connect() as connection:
                report = replay_into(connection, self.spool)
        except Exception as exc:
            raise TraceStoreError(f"cannot replay into {redact(self.db_url)}: {first_line(exc)}") from exc
        self._mark_up()
        return report

    # -- reading -------------------------------------------------------------------------------

    def _read(self, statement) -> list[dict[str, Any]]:
        try:
            self.ensure_schema()
            with self._calls.bound(), self.engine.connect() as connection:
                return [dict(row._mapping) for row in connection.execute(statement)]
        except (TraceStoreError, TraceSchemaError):
            raise
        except Exception as exc:  # the database is away (the caller may fall back to the spool)
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
                raise AmbiguousInvocationIdError(
                    f"invocation id prefix {invocation_id!r} is ambiguous: give more characters"
                )
        return rows[0] if rows else None

    def iter_all(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every row, oldest first."""
        statement = select(tool_invocation).order_by(tool_invocation.c.created_at, tool_invocation.c.id)
        if status:
            statement = statement.where(tool_invocation.c.status == status)
        return self._read(statement)

    def labels(self, invocation_id: str | None = None) -> list[dict[str, Any]]:
        """Every label (of one invocation), oldest first: superseded ones too, nothing is ever deleted."""
        statement = select(lookup_label).order_by(lookup_label.c.created_at, lookup_label.c.id)
        if invocation_id is not None:
            statement = statement.where(lookup_label.c.invocation_id == invocation_id)
        return self._read(statement)

    def count(self) -> int:
        return self._read(select(func.count().label("n")).select_from(tool_invocation))[0]["n"]

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
