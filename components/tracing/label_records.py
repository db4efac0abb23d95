"""
A `lookup_label` record: the verdicts it may carry, its JSON form (spool) and its insertion.

A label waits in the same spool as `tool_invocation` records when the database is away, marked
by `_kind: label`, and is replayed in spool order, so a label spooled after its lookup's row
lands after it. A label of an invocation the database does not hold is refused at insertion
(`RefusedRecord`: the replay moves it to the dead-letter file with the reason).
"""

import functools
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite

from components.tracing.trace_database import RefusedRecord
from components.tracing.trace_schema import LABEL_COLUMNS, lookup_label, tool_invocation

# What a reviewer (or an agent) says about one lookup.
RIGHT_SOURCES = "right_sources"  # these sources answer the query
WRONG = "wrong"  # the answer was wrong; the right source is not named
OFF_TOPIC = "off_topic"  # the knowledge base holds nothing for the query
USEFUL = "useful"  # (agents) the answer, or the named source, helped
NOT_USEFUL = "not_useful"  # (agents) it did not
VERDICTS = (RIGHT_SOURCES, WRONG, OFF_TOPIC, USEFUL, NOT_USEFUL)
# Where a label came from.
ORIGINS = ("cli", "rest", "mcp", "mlflow", "import")

# The spooled record's key telling a label from an invocation record.
KIND_FIELD = "_kind"
LABEL_KIND = "label"


def is_label(data: dict[str, Any]) -> bool:
    return data.get(KIND_FIELD) == LABEL_KIND


def spooled_label(record: dict[str, Any]) -> dict[str, Any]:
    """A label as the spool keeps it (JSON, marked as a label)."""
    data = {key: record.get(key) for key in LABEL_COLUMNS}
    created = data["created_at"]
    if isinstance(created, datetime):
        data["created_at"] = (created if created.tzinfo else created.replace(tzinfo=UTC)).isoformat()
    return {**data, KIND_FIELD: LABEL_KIND}


def label_from_jsonable(data: dict[str, Any]) -> dict[str, Any]:
    """A spooled label as a row; ValueError (the replay dead-letters it) when it is not a label at all."""
    record = {key: data.get(key) for key in LABEL_COLUMNS}
    if record["verdict"] not in VERDICTS:
        raise ValueError(f"verdict {record['verdict']!r} is not one of {', '.join(VERDICTS)}")
    sources = record["sources"]
    if not isinstance(sources, list) or not all(isinstance(source, str) for source in sources):
        raise ValueError("sources is not a list of paths")
    if isinstance(record["created_at"], str):
        record["created_at"] = datetime.fromisoformat(record["created_at"])
    return record


@functools.cache
def _insert_ignoring_duplicates(dialect: str) -> Any:
    module = sqlite if dialect == "sqlite" else postgresql
    return module.insert(lookup_label).on_conflict_do_nothing(index_elements=["id"]).returning(lookup_label.c.id)


def insert_labels(connection, records: list[dict[str, Any]]) -> int:
    """
    Insert labels, skipping ids already present (a pull or an import run twice stores nothing
    twice); returns how many were new. A label without its query takes its invocation's.

    :raises RefusedRecord: A label names an invocation the database does not hold.
    """
    statement = _insert_ignoring_duplicates(connection.dialect.name)
    inserted = 0
    for record in records:
        row = {key: record.get(key) for key in LABEL_COLUMNS}
        if row["invocation_id"] is not None:
            recorded_query = _invocation_query(connection, row["invocation_id"])
            row["query"] = row["query"] or recorded_query
        inserted += len(connection.execute(statement, row).fetchall())
    return inserted


def _invocation_query(connection, invocation_id: str) -> str:
    arguments = connection.execute(
        select(tool_invocation.c.arguments).where(tool_invocation.c.id == invocation_id)
    ).first()
    if arguments is None:
        raise RefusedRecord(f"no invocation {invocation_id!r} in the trace database")
    return str((arguments[0] or {}).get("query") or "")
