"""
Replaying the spool into its database: the records meant for it (lookups' rows and labels) are inserted in spool order
with an insert that ignores ids already present, committed, and only then removed from the
spool, so every record lands exactly once (a crash between commit and rewrite replays ids that
are then skipped). Records the database refuses for their content, records no database can
read, and torn fragments go to the dead-letter file instead of stopping the queue.
"""

import logging
from dataclasses import dataclass
from typing import Any

from components.errors import first_line
from components.tracing.label_records import KIND_FIELD, LABEL_KIND, insert_labels, is_label, label_from_jsonable
from components.tracing.trace_database import is_content_error
from components.tracing.trace_records import TRACE_REPLAYED, from_jsonable, insert_records, without_nul
from components.tracing.trace_spool import TraceSpool

logger = logging.getLogger(__name__)


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


def replay_into(connection, spool: TraceSpool) -> ReplayReport:
    """
    Insert this database's spooled records in order and commit, then rewrite the spool with
    only the other databases' records (under its lock).
    """
    with spool.lock():
        records, torn = spool.read()
        ours = [data for data in records if spool.is_ours(data)]
        others = [data for data in records if not spool.is_ours(data)]
        if not ours and not torn:
            spool.remember_foreign()
            return ReplayReport(kept_for_others=len(others))
        inserted, rejected = _insert_replayed(connection, spool, ours)
        if torn:
            spool.dead_letter([{"torn_line": fragment} for fragment in torn], "torn spool line (incomplete write)")
        # Rewrite only once the rows are committed: a failed commit leaves the spool intact,
        # and a crash between commit and rewrite replays ids that are then skipped.
        spool.keep_only(others)
        spool.remember_foreign()
    report = ReplayReport(len(ours), inserted, rejected, len(others), len(torn))
    logger.info("Replayed spooled trace records into %s: %s", spool.db_label, report)
    if others:
        logger.warning(
            "%d spooled trace record(s) are meant for other trace databases and stay in %s",
            len(others),
            spool.path,
        )
    return report


def _insert_replayed(connection, spool: TraceSpool, pending: list[dict[str, Any]]) -> tuple[int, int]:
    """(rows new, records dead-lettered): in one transaction, or one by one when a record is refused."""
    pending, records, rejected = _readable_records(spool, pending)
    try:
        inserted = _insert_in_order(connection, records)
        connection.commit()
        return inserted, rejected
    except Exception as exc:
        if not is_content_error(exc):
            raise
        connection.rollback()
    inserted = 0
    for data, row in zip(pending, records, strict=True):
        try:
            inserted += _insert_in_order(connection, [row])
            connection.commit()
        except Exception as exc:
            if not is_content_error(exc):
                raise
            connection.rollback()
            spool.dead_letter([data], first_line(exc))
            rejected += 1
    return inserted, rejected


def _insert_in_order(connection, rows: list[dict[str, Any]]) -> int:
    """Invocation rows and labels in spool order: a label lands after the row of its lookup."""
    return sum(insert_labels(connection, [row]) if is_label(row) else insert_records(connection, [row]) for row in rows)


def _readable_records(
    spool: TraceSpool, pending: list[dict[str, Any]]
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
            row = _replayed_row(without_nul(data))
        except (TypeError, ValueError) as exc:
            spool.dead_letter([data], f"unreadable spooled record: {first_line(exc)}")
            rejected += 1
            continue
        kept.append(data)
        rows.append(row)
    return kept, rows, rejected


def _replayed_row(data: dict[str, Any]) -> dict[str, Any]:
    """A spooled record as the row to insert (a label keeps its kind mark for `_insert_in_order`)."""
    if is_label(data):
        return {**label_from_jsonable(data), KIND_FIELD: LABEL_KIND}
    return {**from_jsonable(data), "trace_status": TRACE_REPLAYED}
