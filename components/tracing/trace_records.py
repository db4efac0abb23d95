"""
A `tool_invocation` record: the statuses it carries, the cleaning every record gets before any
database or file sees it, its JSON form (spool, `traces export`), and its insertion.
"""

import functools
import json
import math
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.dialects import postgresql, sqlite

from components.common.text import printable
from components.tracing.trace_schema import COLUMNS, tool_invocation

# What a lookup returns in `traceStatus` and what a row keeps in `trace_status`.
TRACE_RECORDED = "recorded"  # the row is in the database
TRACE_SPOOLED = "spooled"  # the database was unavailable; the record waits in the spool
TRACE_REPLAYED = "replayed"  # (rows only) the record reached the database from the spool
TRACE_LOST = "lost"  # neither the database nor the spool file could take it (logged as an error)
TRACE_REJECTED = "rejected"  # the database refused the record's content: it is in the dead-letter file

# The row's status: ok, or `STATUS_ERROR` (components/contracts.py, the one definition).
STATUS_OK = "ok"


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
    """
    A spooled record as a row. Checked here, the same for every database: SQLite would take NaN,
    Infinity and an `arguments` that is not an object, which PostgreSQL refuses and which no
    standard JSON export can carry (ValueError, so the replay dead-letters it with the reason).
    """
    record = {key: data.get(key) for key in COLUMNS}
    for key in ("arguments", "retrieval_details"):
        if record[key] is not None and not isinstance(record[key], dict):
            raise ValueError(f"{key} is a {type(record[key]).__name__}, not a JSON object")
    for key, value in record.items():
        if (where := _non_finite(value, key)) is not None:
            raise ValueError(f"{where} holds NaN or an infinity: not a JSON number")
    created = record.get("created_at")
    if isinstance(created, str):
        record["created_at"] = datetime.fromisoformat(created)
    return record


def _non_finite(value: Any, where: str) -> str | None:
    """Where a NaN or an infinity sits in a value (`retrieval_details.legs[0].score`), None when nowhere."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    if isinstance(value, dict):
        items = ((f"{where}.{key}", item) for key, item in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{index}]", item) for index, item in enumerate(value))
    else:
        return None
    return next((found for path, item in items if (found := _non_finite(item, path)) is not None), None)


def finite_only(value: Any) -> Any:
    """A value with every NaN and infinity as null: standard JSON (a row written before the check may hold one)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_only(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_only(item) for item in value]
    return value


@functools.cache
def _insert_ignoring_duplicates(dialect: str) -> Any:
    """INSERT ... ON CONFLICT (id) DO NOTHING RETURNING id of the dialect, built once (statements are immutable)."""
    module = sqlite if dialect == "sqlite" else postgresql
    return module.insert(tool_invocation).on_conflict_do_nothing(index_elements=["id"]).returning(tool_invocation.c.id)


def insert_records(connection, records: list[dict[str, Any]]) -> int:
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
