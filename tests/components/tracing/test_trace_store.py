"""
The tool_invocation store on a real SQLite file and a real PostgreSQL: schema and migrations,
the spool, exactly-once replay. No model needed: records are built by hand.
"""

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from components.tracing.trace_store import (
    TRACE_RECORDED,
    TRACE_REPLAYED,
    TRACE_SPOOLED,
    VERSION_TABLE,
    TraceStore,
    TraceStoreError,
    head_revision,
    make_engine,
    metadata,
    schema_revision,
    tool_invocation,
    upgrade_schema,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def record(n: int = 0, **fields) -> dict:
    return {
        "id": str(uuid.uuid4()),
        "tool_name": "lookup_knowledge",
        "arguments": {"query": f"query {n}"},
        "status": "ok",
        "found": True,
        "retrieval_layer": "L0+L1",
        "latency_ms": 12.5,
        "created_at": T0 + timedelta(seconds=n),
        "error": None,
        "retrieval_details": {"candidate_count": n, "evidence_blocks": [{"source": "a.md", "content_preview": "x"}]},
        **fields,
    }


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/traces.db"
    return request.getfixturevalue("pg_schema_url")


def test_schema_is_created_at_head_with_version_recorded(db_url, tmp_path):
    store = TraceStore(db_url, str(tmp_path / "spool.jsonl"))
    assert store.write(record()) == TRACE_RECORDED
    assert schema_revision(store.engine) == head_revision() == "0002_trace_status_and_indexes"
    inspector = sa.inspect(store.engine)
    columns = {c["name"] for c in inspector.get_columns("tool_invocation")}
    assert {
        "id",
        "tool_name",
        "arguments",
        "status",
        "found",
        "retrieval_layer",
        "latency_ms",
        "created_at",
        "error",
        "retrieval_details",
        "trace_status",
    } <= columns
    assert inspector.has_table(VERSION_TABLE)
    assert {"ix_tool_invocation_created_at", "ix_tool_invocation_status"} <= {
        i["name"] for i in inspector.get_indexes("tool_invocation")
    }


def test_older_schema_is_migrated_and_keeps_its_rows(db_url, tmp_path):
    engine = make_engine(db_url)
    upgrade_schema(engine, "0001_tool_invocation")
    assert schema_revision(engine) == "0001_tool_invocation"
    old = record(1)
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO tool_invocation (id, tool_name, arguments, status, found, retrieval_layer, latency_ms, "
                "created_at, error, retrieval_details) VALUES (:id, :tool_name, :arguments, :status, :found, "
                ":retrieval_layer, :latency_ms, :created_at, :error, :retrieval_details)"
            ),
            {
                **old,
                "arguments": json.dumps(old["arguments"]),
                "retrieval_details": json.dumps(old["retrieval_details"]),
            },
        )
    assert "trace_status" not in {c["name"] for c in sa.inspect(engine).get_columns("tool_invocation")}

    store = TraceStore(db_url, str(tmp_path / "spool.jsonl"))
    assert store.write(record(2)) == TRACE_RECORDED
    assert schema_revision(store.engine) == head_revision()
    rows = {r["id"]: r for r in store.iter_all()}
    assert rows[old["id"]]["retrieval_details"] == old["retrieval_details"]
    assert rows[old["id"]]["trace_status"] is None
    assert len(rows) == 2


def test_table_definition_matches_the_migrations(tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(f"sqlite:///{tmp_path}/t.db")
    upgrade_schema(engine)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        diff = [d for d in compare_metadata(context, metadata) if VERSION_TABLE not in str(d)]
    assert diff == []


def test_postgres_stores_retrieval_details_as_jsonb(pg_schema_url, tmp_path):
    store = TraceStore(pg_schema_url, str(tmp_path / "spool.jsonl"))
    rec = record(3)
    store.write(rec)
    with store.engine.connect() as connection:
        kind, count = connection.execute(
            sa.text(
                "SELECT pg_typeof(retrieval_details)::text, (retrieval_details->>'candidate_count')::int "
                "FROM tool_invocation WHERE id = :id"
            ),
            {"id": rec["id"]},
        ).one()
    assert kind == "jsonb"
    assert count == 3


def test_unavailable_database_spools_then_next_write_replays_in_order_exactly_once(tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the database folder should be")
    url = f"sqlite:///{blocker}/traces.db"
    spool = tmp_path / "spool.jsonl"
    store = TraceStore(url, str(spool), retry_interval=0)
    waiting = [record(n) for n in range(3)]
    assert [store.write(r) for r in waiting] == [TRACE_SPOOLED] * 3
    assert [r["id"] for r in store.spooled()] == [r["id"] for r in waiting]

    blocker.unlink()  # the database becomes reachable
    latest = record(3)
    assert store.write(latest) == TRACE_RECORDED
    assert spool.read_text() == ""
    rows = store.iter_all()
    assert [r["id"] for r in rows] == [r["id"] for r in waiting] + [latest["id"]]
    assert [r["trace_status"] for r in rows] == [TRACE_REPLAYED] * 3 + [TRACE_RECORDED]
    assert rows[0]["retrieval_details"] == waiting[0]["retrieval_details"]
    assert store.replay() == (0, 0)
    assert store.count() == 4


def test_replay_after_a_crash_between_commit_and_truncation_adds_nothing_twice(tmp_path):
    url = f"sqlite:///{tmp_path}/traces.db"
    spool = tmp_path / "spool.jsonl"
    down = TraceStore(f"sqlite:///{tmp_path}/missing-parent-file/x/t.db", str(spool), retry_interval=0)
    (tmp_path / "missing-parent-file").write_text("not a folder")
    spooled = [record(n) for n in range(4)]
    for r in spooled:
        assert down.write(r) == TRACE_SPOOLED
    store = TraceStore(url, str(spool))
    store.ensure_schema()
    with store.engine.begin() as connection:  # as if a replay had committed these rows, then died
        connection.execute(sa.insert(tool_invocation), [spooled[0], spooled[2]])
    assert store.replay() == (4, 2)
    assert store.count() == 4
    assert spool.read_text() == ""


def test_replay_keeps_the_spool_while_the_database_is_away(tmp_path):
    spool = tmp_path / "spool.jsonl"
    (tmp_path / "blocker").write_text("")
    store = TraceStore(f"sqlite:///{tmp_path}/blocker/t.db", str(spool), retry_interval=0)
    store.write(record())
    with pytest.raises(TraceStoreError, match="cannot replay"):
        store.replay()
    assert len(store.spooled()) == 1


def test_retry_interval_spools_without_waiting_on_the_database(tmp_path):
    (tmp_path / "blocker").write_text("")
    store = TraceStore(f"sqlite:///{tmp_path}/blocker/t.db", str(tmp_path / "spool.jsonl"), retry_interval=60)
    assert store.write(record(0)) == TRACE_SPOOLED
    (tmp_path / "blocker").unlink()
    # Within the retry interval the store does not try the database again, even though it is back.
    assert store.write(record(1)) == TRACE_SPOOLED
    assert len(store.spooled()) == 2
    assert store.replay() == (2, 2)


def test_unreadable_url_is_spooled_not_raised(tmp_path):
    store = TraceStore("notadialect://nowhere", str(tmp_path / "spool.jsonl"), retry_interval=0)
    assert store.write(record()) == TRACE_SPOOLED


def test_one_outage_warns_once(tmp_path, caplog):
    (tmp_path / "blocker").write_text("")
    store = TraceStore(f"sqlite:///{tmp_path}/blocker/t.db", str(tmp_path / "spool.jsonl"), retry_interval=0)
    with caplog.at_level("WARNING", logger="components.tracing.trace_store"):
        for n in range(5):
            store.write(record(n))
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1


def test_get_by_prefix_and_latest_filters(tmp_path):
    store = TraceStore(f"sqlite:///{tmp_path}/t.db", str(tmp_path / "spool.jsonl"))
    ok = record(1)
    failed = record(2, status="error", error="boom", found=False)
    store.write(ok)
    store.write(failed)
    assert store.get(ok["id"][:8])["id"] == ok["id"]
    assert store.get("ffffffff-no-such-id") is None
    assert [r["id"] for r in store.latest(last=10)] == [failed["id"], ok["id"]]
    assert [r["id"] for r in store.latest(last=10, status="error")] == [failed["id"]]
    assert [r["id"] for r in store.latest(last=1)] == [failed["id"]]


def test_lone_surrogates_in_a_query_are_stored_as_replacement_characters(db_url, tmp_path):
    # A JSON-escaped "\ud800" reaches Python as a lone surrogate, which no database accepts as UTF-8.
    store = TraceStore(db_url, str(tmp_path / "spool.jsonl"))
    row = record(1, arguments={"query": "disk \ud800 full"})
    row["retrieval_details"]["query_transform"] = {"raw": "disk \ud800 full"}
    assert store.write(row) == TRACE_RECORDED
    stored = store.get(row["id"])
    assert stored["arguments"] == {"query": "disk \ufffd full"}
    assert stored["retrieval_details"]["query_transform"]["raw"] == "disk \ufffd full"
