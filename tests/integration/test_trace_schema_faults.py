"""
A trace database this code must not migrate (written by a newer version, or with a damaged version
table) is named in one line with what to do, on SQLite and PostgreSQL: a lookup's record spools
with that line as the reason, and the read-only `knowledge traces` commands refuse it without
writing. They never migrate: a database at an older revision is refused too, and left as it was.
"""

import logging
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import inspect, text

from components.tracing.trace_database import dispose_engines, make_engine
from components.tracing.trace_schema import VERSION_TABLE, newest_migration, upgrade_schema
from components.tracing.trace_store import TraceStore
from tests.conftest import state_overrides
from tests.helpers import run_main, stderr_lines

FUTURE = "0099_from_a_newer_version"
CASES = {
    "newer": (
        f"UPDATE {VERSION_TABLE} SET version_num = '{FUTURE}'",
        f"was written by a newer lookup-knowledge, revision {FUTURE}",
    ),
    "two rows": (
        f"INSERT INTO {VERSION_TABLE} (version_num) VALUES ('0001_tool_invocation')",
        f"is damaged: {VERSION_TABLE} holds 2 revisions",
    ),
    "no version table": (
        f"DROP TABLE {VERSION_TABLE}",
        f"is damaged: its tool_invocation table has no {VERSION_TABLE} table beside it",
    ),
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    url = f"sqlite:///{tmp_path}/traces.db" if request.param == "sqlite" else request.getfixturevalue("pg_schema_url")
    yield url
    dispose_engines()


def at_head_then(db_url: str, statement: str | None) -> None:
    engine = make_engine(db_url)
    upgrade_schema(engine)
    if statement:
        with engine.begin() as connection:
            connection.execute(text(statement))
    engine.dispose()


def recorded_revisions(db_url: str) -> list[str] | None:
    engine = make_engine(db_url)
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table(VERSION_TABLE):
                return None
            return sorted(row[0] for row in connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")))
    finally:
        engine.dispose()


def record() -> dict:
    return {
        "id": str(uuid.uuid4()),
        "tool_name": "lookup_knowledge",
        "arguments": {"query": "disk full"},
        "status": "ok",
        "found": True,
        "retrieval_layer": "l1",
        "latency_ms": 1.0,
        "created_at": datetime.now(tz=UTC),
        "error": None,
        "retrieval_details": {},
    }


@pytest.mark.parametrize("case", CASES)
def test_a_record_spools_with_the_case_named(case, db_url, tmp_path, caplog):
    statement, expected = CASES[case]
    at_head_then(db_url, statement)
    before = recorded_revisions(db_url)
    store = TraceStore(db_url, str(tmp_path / "spool.jsonl"), retry_interval=0)
    with caplog.at_level(logging.WARNING, logger="components.tracing"):
        assert store.write(record()) == "spooled"
    [warning] = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert expected in warning and "trace.db_url" in warning
    assert recorded_revisions(db_url) == before


@pytest.mark.parametrize("case", CASES)
def test_reading_traces_refuses_the_case_in_one_line_and_writes_nothing(case, db_url, tmp_path, capsys):
    statement, expected = CASES[case]
    at_head_then(db_url, statement)
    before = recorded_revisions(db_url)
    done = run_main(capsys, "traces", "list", f"trace.db_url='{db_url}'", *state_overrides(tmp_path / "state"))
    assert done.returncode == 2 and done.stdout == ""
    [line] = stderr_lines(done)
    assert expected in line
    assert recorded_revisions(db_url) == before


@pytest.mark.parametrize("action", [["list"], ["show", "abcdef12"], ["export"]])
def test_reading_traces_never_migrates_an_older_database(action, db_url, tmp_path, capsys):
    engine = make_engine(db_url)
    upgrade_schema(engine, "0001_tool_invocation")
    engine.dispose()
    done = run_main(capsys, "traces", *action, f"trace.db_url='{db_url}'", *state_overrides(tmp_path / "state"))
    assert done.returncode == 2 and done.stdout == ""
    [line] = stderr_lines(done)
    assert f"is at revision 0001_tool_invocation, this lookup-knowledge reads {newest_migration()}" in line
    assert recorded_revisions(db_url) == ["0001_tool_invocation"]
