"""
One spooled record with a value the database cannot take must not stop tracing: through the
CLI's entry point on SQLite and PostgreSQL, the record goes to the dead-letter file with its
reason, the records around it are replayed, and the next lookup is recorded directly.
"""

import json
import uuid

import pytest

from components.tracing.trace_database import target_key
from components.tracing.trace_store import TraceStore
from tests.helpers import run_main
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


def test_replay_moves_a_bad_record_aside_and_replays_the_rest(db_url, tmp_path, capsys):
    state = tmp_path / "state"
    good, bad = write_spool(state, db_url)
    done = run_main(capsys, "traces", "replay", f"paths.state_dir={state}", "mlflow=off", f"trace.db_url='{db_url}'")
    assert done.returncode == 0, done.stderr
    assert "2 new" in done.stdout and "1 refused" in done.stdout
    [letter] = dead_letters(state)
    assert letter["id"] == bad and "never" in letter["reason"]
    store = TraceStore(db_url, str(state / "trace-spool.jsonl"))
    assert [store.get(i)["trace_status"] for i in good] == ["replayed", "replayed"]
    assert (state / "trace-spool.jsonl").read_text() == ""
    again = run_main(capsys, "traces", "replay", f"paths.state_dir={state}", "mlflow=off", f"trace.db_url='{db_url}'")
    assert again.returncode == 0 and "replayed 0" in again.stdout


def test_the_next_lookup_replays_around_a_bad_record_and_is_recorded(db_url, served_index, tmp_path_factory, capsys):
    state = copy_state(served_index, tmp_path_factory, "bad-spool")
    good, bad = write_spool(state, db_url)
    done = run_main(
        capsys, "lookup", "--compact", "disk full", f"paths.state_dir={state}", "mlflow=off", f"trace.db_url='{db_url}'"
    )
    assert done.returncode == 0, done.stderr
    invocation = json.loads(done.stdout)["invocationId"]
    store = TraceStore(db_url, str(state / "trace-spool.jsonl"))
    assert store.get(invocation)["trace_status"] == "recorded"
    assert [store.get(i)["trace_status"] for i in good] == ["replayed", "replayed"]
    assert [letter["id"] for letter in dead_letters(state)] == [bad]
    assert (state / "trace-spool.jsonl").read_text() == ""


def _strict_json(line: str):
    def refuse(constant):
        raise ValueError(f"not standard JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


def test_nan_infinity_and_a_non_object_arguments_are_refused_alike_and_exports_are_standard_json(
    db_url, tmp_path, capsys
):
    state = tmp_path / "state"
    state.mkdir()
    good = str(uuid.uuid4())
    bad = {
        str(uuid.uuid4()): {"latency_ms": float("nan")},
        str(uuid.uuid4()): {"retrieval_details": {"legs": [{"score": float("inf")}]}},
        str(uuid.uuid4()): {"arguments": "disk full"},
        str(uuid.uuid4()): {"arguments": ["disk", "full"]},
    }
    lines = [spooled(db_url, good, latency_ms=12.5)] + [spooled(db_url, i, **values) for i, values in bad.items()]
    (state / "trace-spool.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    overrides = [f"paths.state_dir={state}", "mlflow=off", f"trace.db_url='{db_url}'"]
    done = run_main(capsys, "traces", "replay", *overrides)
    assert done.returncode == 0, done.stderr
    assert "1 new" in done.stdout and "4 refused" in done.stdout, done.stdout
    reasons = {letter["id"]: letter["reason"] for letter in dead_letters(state)}
    assert set(reasons) == set(bad)
    assert all("not a JSON number" in reasons[i] for i in list(bad)[:2]), reasons
    assert all("not a JSON object" in reasons[i] for i in list(bad)[2:]), reasons
    exported = run_main(capsys, "traces", "export", "--output", str(tmp_path / "out.jsonl"), *overrides)
    assert exported.returncode == 0, exported.stderr
    rows = [_strict_json(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert good in [row["id"] for row in rows]


def test_a_nan_already_in_a_sqlite_row_exports_as_null(tmp_path, capsys):
    from datetime import UTC, datetime

    db_url = f"sqlite:///{tmp_path}/traces.db"
    store = TraceStore(db_url, str(tmp_path / "trace-spool.jsonl"))
    record = {"id": "old-row", "tool_name": "lookup_knowledge", "arguments": {"query": "x"}, "status": "ok"}
    assert store.write({**record, "latency_ms": float("nan"), "created_at": datetime.now(UTC)}) == "recorded"
    exported = run_main(
        capsys, "traces", "export", f"paths.state_dir={tmp_path}", "mlflow=off", f"trace.db_url={db_url}"
    )
    assert exported.returncode == 0, exported.stderr
    [row] = [_strict_json(line) for line in exported.stdout.splitlines()]
    assert row["id"] == "old-row" and row["latency_ms"] is None
