"""
Labels in the trace store (`lookup_label`) on a real SQLite file and a real PostgreSQL: a label
lands once, a later one supersedes and the earlier stays, a label of an unknown invocation is
refused, and a label written while the database is away waits in the spool and is replayed.
"""

import json
from datetime import timedelta

import pytest

from components.tracing.label_records import OFF_TOPIC, RIGHT_SOURCES, spooled_label
from components.tracing.trace_records import TRACE_RECORDED, TRACE_REJECTED, TRACE_SPOOLED
from components.tracing.trace_replay import ReplayReport
from components.tracing.trace_store import TraceStore
from pipelines.labels.export import latest_labels
from pipelines.labels.record import new_label
from tests.components.tracing.test_trace_store import T0, record


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/traces.db"
    else:
        url = request.getfixturevalue("pg_schema_url")
    store = TraceStore(url, str(tmp_path / "spool.jsonl"), retry_interval=0)
    yield store
    store.dispose()


def label_of(invocation: dict, verdict: str = RIGHT_SOURCES, sources=("disk/disk-full.md",), minutes: int = 0, **kw):
    return new_label(
        invocation["id"],
        None,
        verdict,
        list(sources),
        kw.pop("reviewer", "alice"),
        "cli",
        created_at=T0 + timedelta(minutes=minutes),
        **kw,
    )


def test_a_label_lands_once_with_its_invocations_query(store):
    invocation = record(1)
    assert store.write(invocation) == TRACE_RECORDED
    label = label_of(invocation)
    assert store.write_label(label) == TRACE_RECORDED
    assert store.write_label(label) == TRACE_RECORDED  # the same label again: nothing stored twice
    [stored] = store.labels()
    assert stored["id"] == label["id"] and stored["query"] == "query 1"
    assert stored["sources"] == ["disk/disk-full.md"] and stored["verdict"] == RIGHT_SOURCES
    assert stored["reviewer"] == "alice" and stored["origin"] == "cli"


def test_a_later_label_supersedes_and_the_earlier_stays(store):
    invocation = record(2)
    store.write(invocation)
    first = label_of(invocation, minutes=0)
    second = label_of(invocation, OFF_TOPIC, (), minutes=5, reviewer="bob")
    store.write_label(second)
    store.write_label(first)  # written later, made earlier: time decides, not arrival
    stored = store.labels(invocation["id"])
    assert [s["id"] for s in stored] == [first["id"], second["id"]]
    latest, superseded = latest_labels(stored)
    assert [s["id"] for s in latest] == [second["id"]] and superseded == 1


def test_a_label_of_an_unknown_invocation_is_refused(store):
    label = label_of({"id": "no-such-invocation"})
    assert store.write_label(label) == TRACE_REJECTED
    assert store.labels() == []
    dead = [json.loads(line) for line in store.dead_letter_path.read_text().splitlines()]
    assert dead[0]["id"] == label["id"] and "no invocation" in dead[0]["reason"]


def test_a_label_written_while_the_database_is_away_is_spooled_and_replayed(tmp_path):
    blocker = tmp_path / "state"
    url = f"sqlite:///{blocker}/traces.db"
    store = TraceStore(url, str(tmp_path / "spool.jsonl"), retry_interval=0)
    recorded = record(3)
    assert store.write(recorded) == TRACE_RECORDED
    store.dispose()
    blocker.rename(tmp_path / "away")
    blocker.write_text("a file where the database folder should be")
    spooled_lookup = record(4)
    assert store.write(spooled_lookup) == TRACE_SPOOLED
    labels = [label_of(recorded), label_of(spooled_lookup, minutes=1), label_of({"id": "never-recorded"}, minutes=2)]
    assert [store.write_label(label) for label in labels] == [TRACE_SPOOLED] * 3
    assert [r["id"] for r in store.spooled()] == [spooled_lookup["id"]]  # labels are not invocation records

    blocker.unlink()
    (tmp_path / "away").rename(blocker)  # the database is back
    report = store.replay()
    assert report == ReplayReport(pending=4, inserted=3, rejected=1)
    assert [s["id"] for s in store.labels()] == [labels[0]["id"], labels[1]["id"]]
    assert [s["query"] for s in store.labels()] == ["query 3", "query 4"]
    assert "no invocation 'never-recorded'" in store.dead_letter_path.read_text()
    assert store.replay() == ReplayReport()


def test_a_spooled_label_is_replayed_into_postgres(pg_schema_url, tmp_path):
    store = TraceStore(pg_schema_url, str(tmp_path / "spool.jsonl"), retry_interval=0)
    recorded = record(5)
    store.write(recorded)
    label = label_of(recorded)
    store.spool.append(spooled_label(label))  # as a write during an outage leaves it
    assert store.replay() == ReplayReport(pending=1, inserted=1)
    assert [(s["id"], s["query"], s["sources"]) for s in store.labels()] == [
        (label["id"], "query 5", ["disk/disk-full.md"])
    ]
    store.dispose()
