"""
One spooled record with a value the database cannot take must not stop tracing: through CLI
children on SQLite and PostgreSQL, the record goes to the dead-letter file with its reason, the
records around it are replayed, and the next lookup is recorded directly.
"""

import json
import uuid

import pytest

from components.tracing.trace_database import target_key
from components.tracing.trace_store import TraceStore
from tests.helpers import run_cli
from tests.integration.serving_helpers import copy_state


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/traces.db"
    return request.getfixturevalue("pg_schema_url")


def spooled(db_url: str, record_id: str, **values) -> str:
    """A spool line as `knowledge` writes it for `db_url`, with `values` replacing good ones."""
    record = {
        "id": record_id,
        "_target": target_key(db_url),
        "tool_name": "lookup_knowledge",
        "arguments": {"query": "x"},
        "status": "ok",
        "found": False,
        "created_at": "2026-12-01T09:30:00+00:00",
        **values,
    }
    return json.dumps(record)


def write_spool(state, db_url: str) -> tuple[list[str], str]:
    """A spool of good, bad (created_at "never"), good: (the good ids, the bad id)."""
    good, bad = [str(uuid.uuid4()), str(uuid.uuid4())], str(uuid.uuid4())
    lines = [spooled(db_url, good[0]), spooled(db_url, bad, created_at="never"), spooled(db_url, good[1])]
    state.mkdir(parents=True, exist_ok=True)
    (state / "trace-spool.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return good, bad


def dead_letters(state) -> list[dict]:
    path = state / "trace-spool.dead.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def test_replay_moves_a_bad_record_aside_and_replays_the_rest(db_url, tmp_path):
    state = tmp_path / "state"
    good, bad = write_spool(state, db_url)
    done = run_cli("traces", "replay", f"paths.state_dir={state}", "mlflow=off", f"trace.db_url='{db_url}'")
    assert done.returncode == 0, done.stderr
    assert "2 new" in done.stdout and "1 refused" in done.stdout
    [letter] = dead_letters(state)
    assert letter["id"] == bad and "never" in letter["reason"]
    store = TraceStore(db_url, str(state / "trace-spool.jsonl"))
    assert [store.get(i)["trace_status"] for i in good] == ["replayed", "replayed"]
    assert (state / "trace-spool.jsonl").read_text() == ""
    again = run_cli("traces", "replay", f"paths.state_dir={state}", "mlflow=off", f"trace.db_url='{db_url}'")
    assert again.returncode == 0 and "replayed 0" in again.stdout


def test_the_next_lookup_replays_around_a_bad_record_and_is_recorded(db_url, served_index, tmp_path_factory):
    state = copy_state(served_index, tmp_path_factory, "bad-spool")
    good, bad = write_spool(state, db_url)
    done = run_cli(
        "lookup", "--compact", "disk full", f"paths.state_dir={state}", "mlflow=off", f"trace.db_url='{db_url}'"
    )
    assert done.returncode == 0, done.stderr
    invocation = json.loads(done.stdout)["invocationId"]
    store = TraceStore(db_url, str(state / "trace-spool.jsonl"))
    assert store.get(invocation)["trace_status"] == "recorded"
    assert [store.get(i)["trace_status"] for i in good] == ["replayed", "replayed"]
    assert [letter["id"] for letter in dead_letters(state)] == [bad]
    assert (state / "trace-spool.jsonl").read_text() == ""
