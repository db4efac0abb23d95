"""
The tool_invocation store on a real SQLite file and a real PostgreSQL: schema and migrations,
the spool, exactly-once replay. No model needed: records are built by hand.
"""

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from components.errors import ParameterError
from components.tracing.trace_database import make_engine
from components.tracing.trace_records import TRACE_RECORDED, TRACE_REJECTED, TRACE_REPLAYED, TRACE_SPOOLED, to_jsonable
from components.tracing.trace_replay import ReplayReport
from components.tracing.trace_schema import (
    VERSION_TABLE,
    head_revision,
    schema_revision,
    tool_invocation,
    upgrade_schema,
)
from components.tracing.trace_store import TraceStore, TraceStoreError

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
    assert schema_revision(store.engine) == head_revision() == "0003_lookup_label"
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
    assert {"invocation_id", "query", "verdict", "sources", "reviewer", "origin", "created_at"} <= {
        c["name"] for c in inspector.get_columns("lookup_label")
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
    assert store.replay() == ReplayReport()
    assert store.count() == 4


def test_replay_after_a_crash_between_commit_and_truncation_adds_nothing_twice(tmp_path):
    url = f"sqlite:///{tmp_path}/db/traces.db"
    spool = tmp_path / "spool.jsonl"
    (tmp_path / "db").write_text("not a folder")
    down = TraceStore(url, str(spool), retry_interval=0)
    spooled = [record(n) for n in range(4)]
    for r in spooled:
        assert down.write(r) == TRACE_SPOOLED
    (tmp_path / "db").unlink()
    store = TraceStore(url, str(spool))
    store.ensure_schema()
    with store.engine.begin() as connection:  # as if a replay had committed these rows, then died
        connection.execute(sa.insert(tool_invocation), [spooled[0], spooled[2]])
    assert store.replay() == ReplayReport(pending=4, inserted=2)
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
    assert store.replay() == ReplayReport(pending=2, inserted=2)


def test_unreadable_url_is_spooled_not_raised(tmp_path):
    store = TraceStore("postgresql+nosuchdriver://nowhere/db", str(tmp_path / "spool.jsonl"), retry_interval=0)
    assert store.write(record()) == TRACE_SPOOLED


@pytest.mark.parametrize("db_url", ["notadialect://nowhere", "mysql://u@h/db", "traces.db", ""])
def test_a_url_of_no_trace_database_is_refused_when_built(tmp_path, db_url):
    with pytest.raises(ParameterError, match=r"^db_url=.* is not a database URL"):
        TraceStore(db_url, str(tmp_path / "spool.jsonl"))


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


def dead_letters(store: TraceStore) -> list[dict]:
    return [json.loads(line) for line in store.dead_letter_path.read_text().splitlines()]


def test_a_nul_in_a_query_is_stored_escaped_and_blocks_nothing(db_url, tmp_path):
    store = TraceStore(db_url, str(tmp_path / "spool.jsonl"), retry_interval=0)
    row = record(1, arguments={"query": "disk\x00full"})
    row["retrieval_details"]["query_transform"] = {"raw": "disk\x00full"}
    assert store.write(row) == TRACE_RECORDED
    stored = store.get(row["id"])
    assert stored["arguments"] == {"query": "disk\\u0000full"}
    assert stored["retrieval_details"]["query_transform"]["raw"] == "disk\\u0000full"
    assert store.write(record(2)) == TRACE_RECORDED and store.count() == 2


def test_a_spooled_record_with_a_nul_is_replayed_on_postgres(pg_schema_url, tmp_path):
    spool = tmp_path / "spool.jsonl"
    # As an older version spooled it: the raw NUL in the JSON line, ahead of a good record.
    bad, good = record(1, arguments={"query": "a\x00b"}), record(2)
    spool.write_text("".join(json.dumps(to_jsonable(r)) + "\n" for r in (bad, good)))
    store = TraceStore(pg_schema_url, str(spool))
    assert store.replay() == ReplayReport(pending=2, inserted=2)
    assert store.get(bad["id"])["arguments"] == {"query": "a\\u0000b"}


def test_a_record_the_database_refuses_goes_to_the_dead_letter_file_not_back_to_the_queue(db_url, tmp_path):
    spool = tmp_path / "spool.jsonl"
    refused = record(1, tool_name="x" * 200)  # longer than the column allows on PostgreSQL
    refused_status = "error-" * 10  # status is String(16): PostgreSQL refuses it
    later = [record(2), record(3, status=refused_status), record(4)]
    spool.write_text("".join(json.dumps(to_jsonable(r)) + "\n" for r in later))
    store = TraceStore(db_url, str(spool))
    report = store.replay()
    if make_url_backend(db_url) == "sqlite":  # SQLite does not enforce lengths: everything lands
        assert report == ReplayReport(pending=3, inserted=3)
        return
    assert report == ReplayReport(pending=3, inserted=2, rejected=1)
    assert spool.read_text() == ""
    letters = dead_letters(store)
    assert [d["id"] for d in letters] == [later[1]["id"]] and letters[0]["reason"]
    assert {r["id"] for r in store.iter_all()} == {later[0]["id"], later[2]["id"]}
    # A live write refused for its content is dead-lettered too, and the next one records.
    assert store.write(refused) == TRACE_REJECTED
    assert store.write(record(5)) == TRACE_RECORDED
    assert spool.read_text() == ""


def make_url_backend(db_url: str) -> str:
    return sa.engine.make_url(db_url).get_backend_name()


def test_postgres_replay_counts_new_rows(pg_schema_url, tmp_path):
    spool = tmp_path / "spool.jsonl"
    spooled = [record(n) for n in range(3)]
    spool.write_text("".join(json.dumps(to_jsonable(r)) + "\n" for r in spooled))
    store = TraceStore(pg_schema_url, str(spool))
    report = store.replay()
    assert (report.pending, report.inserted, report.already_present) == (3, 3, 0)


def test_a_torn_spool_line_loses_only_its_own_part(tmp_path):
    spool = tmp_path / "spool.jsonl"
    (tmp_path / "blocker").write_text("")
    down = TraceStore(f"sqlite:///{tmp_path}/blocker/t.db", str(spool), retry_interval=0)
    first = record(1)
    assert down.write(first) == TRACE_SPOOLED
    with open(spool, "a") as handle:  # a crash in the middle of the next append
        handle.write('{"id": "torn-record", "tool_na')
    after = record(2)
    assert down.write(after) == TRACE_SPOOLED
    assert [r["id"] for r in down.spooled()] == [first["id"], after["id"]]

    (tmp_path / "blocker").unlink()
    store = TraceStore(f"sqlite:///{tmp_path}/blocker/t.db", str(spool))
    assert store.replay() == ReplayReport(pending=2, inserted=2, torn=1)
    assert [d["torn_line"] for d in dead_letters(store)] == ['{"id": "torn-record", "tool_na']
    assert spool.read_text() == "" and store.replay() == ReplayReport()


def test_a_record_glued_to_a_torn_line_by_an_older_version_is_recovered(tmp_path):
    spool = tmp_path / "spool.jsonl"
    whole = record(1)
    spool.write_text('{"id": "torn", "tool' + json.dumps(to_jsonable(whole)) + "\n")
    store = TraceStore(f"sqlite:///{tmp_path}/t.db", str(spool))
    assert store.replay() == ReplayReport(pending=1, inserted=1, torn=1)
    assert store.get(whole["id"]) is not None


def test_spooled_records_are_replayed_only_into_their_own_database(tmp_path):
    spool = tmp_path / "spool.jsonl"
    (tmp_path / "blocker").write_text("")
    down = TraceStore(f"sqlite:///{tmp_path}/blocker/a.db", str(spool), retry_interval=0)
    meant_for_a = record(1)
    assert down.write(meant_for_a) == TRACE_SPOOLED
    other = TraceStore(f"sqlite:///{tmp_path}/b.db", str(spool))
    assert other.write(record(2)) == TRACE_RECORDED
    assert other.replay() == ReplayReport(kept_for_others=1)
    assert other.count() == 1 and other.spooled() == []
    (tmp_path / "blocker").unlink()
    own = TraceStore(f"sqlite:///{tmp_path}/blocker/a.db", str(spool))
    assert own.replay() == ReplayReport(pending=1, inserted=1)
    assert [r["id"] for r in own.iter_all()] == [meant_for_a["id"]]
    assert spool.read_text() == ""
