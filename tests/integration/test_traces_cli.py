"""`knowledge traces list|show|export|replay`, in process: output, and one stderr line + exit 2 on bad input."""

import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from components.tracing.trace_store import TraceStore
from pipelines.cli import main
from tests.conftest import state_overrides
from tests.helpers import run_cli, stderr_lines

T0 = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


@pytest.fixture(scope="module")
def recorded(sample_service):
    """Three real rows (evidence, no evidence, error) in the session sample's trace database."""
    results = [sample_service.lookup(q) for q in ("pg replica lag", "how to bake sourdough bread")]
    writer = sample_service.trace_writer
    # Started now, not at T0: the session sample's database holds rows of other tests, and `list --last`
    # orders by time, so a row dated in the past could fall outside the window.
    failure = writer.record_error(
        "disk full", RuntimeError("vector store did not answer"), time.time(), component_name="retriever"
    )
    return results + [failure]


@pytest.fixture
def overrides(sample_cfg):
    return state_overrides(sample_cfg.paths.state_dir)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_the_latest_invocations(recorded, overrides, capsys):
    code, out, err = run(capsys, "traces", "list", "--last", "50", *overrides)
    assert code == 0 and err == ""
    for result in recorded:
        assert result.invocation_id in out
    assert "pg replica lag" in out and "vector store did not answer" in out
    code, out, _ = run(capsys, "traces", "list", "--status", "error", *overrides)
    assert recorded[2].invocation_id in out and recorded[0].invocation_id not in out


def test_show_is_readable_with_attempts_rerank_and_evidence(recorded, overrides, capsys):
    code, out, err = run(capsys, "traces", "show", recorded[0].invocation_id, *overrides)
    assert code == 0 and err == ""
    assert f"Invocation {recorded[0].invocation_id}" in out
    for section in ("Retrieval attempts", "Rerank trace", "Evidence (", "L0 hints", "Context pack"):
        assert section in out
    assert "category=database" in out and "selected" in out
    assert recorded[0].evidence_blocks[0].source in out
    code, out, _ = run(capsys, "traces", "show", recorded[1].invocation_id[:10], *overrides)
    assert code == 0 and "Evidence (0 of" in out and "(none)" in out
    code, out, _ = run(capsys, "traces", "show", recorded[2].invocation_id, *overrides)
    assert "RuntimeError: vector store did not answer (in retriever)" in out
    code, out, _ = run(capsys, "traces", "show", recorded[0].invocation_id, "--json", *overrides)
    assert json.loads(out)["retrieval_details"]["l0_hints"]["entities"] == ["PostgreSQL"]


def test_export_jsonl_has_every_row_oldest_first(recorded, overrides, capsys, tmp_path):
    code, out, _ = run(capsys, "traces", "export", "--format", "jsonl", *overrides)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and {r.invocation_id for r in recorded} <= {row["id"] for row in rows}
    assert [row["created_at"] for row in rows] == sorted(row["created_at"] for row in rows)
    target = tmp_path / "traces.jsonl"
    code, _, err = run(capsys, "traces", "export", "--output", str(target), "--status", "error", *overrides)
    assert code == 0 and "exported" in err
    assert recorded[2].invocation_id in target.read_text()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["traces", "show", "00000000-nope"], "no invocation '00000000-nope'"),
        (["traces", "export", "--format", "csv"], "--format 'csv' is not supported"),
        (["traces", "list", "--status", "broken"], "--status 'broken' is not one of ok, error"),
        (["traces", "list", "--last", "-1"], "--last -1"),
        (["traces", "list", "notakeyvalue"], "overrides look like key=value"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path, capsys):
    from pipelines.config.settings import load_config
    from pipelines.state.traces import open_store

    open_store(
        load_config(state_overrides(tmp_path / "state"))
    ).ensure_schema()  # an empty database: each check is reached
    code, out, err = run(capsys, *argv, *state_overrides(tmp_path / "state"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("knowledge: error: ") and message in err


def test_unreachable_database_is_one_line_and_exit_1(tmp_path, capsys):
    url = "postgresql+psycopg://postgres@127.0.0.1:9/test"
    code, out, err = run(capsys, "traces", "list", f"trace.db_url={url}", *state_overrides(tmp_path / "state"))
    assert code == 1 and err.count("\n") == 1 and "cannot read traces" in err


def test_replay_through_the_cli(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/blocked/t.db"
    overrides = state_overrides(tmp_path / "state", f"trace.db_url={url}")
    spool = tmp_path / "state" / "trace-spool.jsonl"
    (tmp_path / "blocked").write_text("")
    down = TraceStore(url, str(spool), retry_interval=0)
    ids = []
    for n in range(3):
        record_id = str(uuid.uuid4())
        ids.append(record_id)
        down.write(
            {
                "id": record_id,
                "tool_name": "lookup_knowledge",
                "arguments": {"query": f"q{n}"},
                "status": "ok",
                "found": True,
                "retrieval_layer": "L1",
                "latency_ms": 1.0,
                "created_at": T0 + timedelta(seconds=n),
                "error": None,
                "retrieval_details": {},
            }
        )
    (tmp_path / "blocked").unlink()  # the database is back
    code, out, _ = run(capsys, "traces", "replay", *overrides)
    assert code == 0 and "replayed 3 spooled record(s)" in out and "3 new" in out
    code, out, _ = run(capsys, "traces", "list", *overrides)
    assert all(i in out for i in ids)
    assert spool.read_text() == ""


@pytest.mark.parametrize("action", [["list"], ["show", "abcdef12"], ["export"]])
def test_reading_a_missing_database_creates_nothing_and_exits_2(action, tmp_path):
    missing = tmp_path / "MISSING"
    done = run_cli("traces", *action, f"trace.db_url=sqlite:///{missing}/x.db", *state_overrides(tmp_path / "s"))
    assert done.returncode == 2
    assert len(stderr_lines(done)) == 1
    assert f"no trace database at {missing}/x.db" in done.stderr
    assert not missing.exists()


def test_a_trace_db_url_that_is_not_a_url_exits_2(tmp_path):
    done = run_cli("traces", "list", "trace.db_url=notaurl", *state_overrides(tmp_path / "s"))
    assert done.returncode == 2
    assert len(stderr_lines(done)) == 1 and "trace.db_url='notaurl': is not a database URL" in done.stderr


def test_a_bad_trace_setting_is_named_by_the_key_the_lookup_pipeline_wires(tmp_path, capsys):
    code = main(["traces", "list", "trace.retry_interval_s=-1", *state_overrides(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "trace.retry_interval_s=-1" in err and "at least 0" in err


def test_reading_rows_opens_the_store_the_lookup_pipeline_file_gives(tmp_path, capsys):
    """A pipeline file that sets the trace writer's retry interval itself: traces read that value, not `trace.*`."""
    from pipelines.config.pipeline_files import YAML_DIR

    text = (YAML_DIR / "lookup_knowledge.yml").read_text(encoding="utf-8")
    wiring = "retry_interval: ${trace.retry_interval_s}"
    assert wiring in text
    custom = tmp_path / "lookup.yml"
    custom.write_text(text.replace(wiring, "retry_interval: -2"), encoding="utf-8")
    code = main(["traces", "list", f"pipeline.lookup={custom}", *state_overrides(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "trace_writer.retry_interval=-2" in err and "at least 0" in err


@pytest.mark.parametrize("argv", [["traces", "list"], ["labels", "list"]])
def test_reading_rows_imports_no_component_stack(argv, tmp_path):
    """Reading rows builds no pipeline: neither Haystack nor pymilvus is imported to check component keys."""
    import subprocess
    import sys

    from tests.helpers import child_env

    code = (
        "import sys\nfrom pipelines.cli import main\n"
        f"main({[*argv, f'trace.db_url=sqlite:///{tmp_path}/t.db', f'paths.state_dir={tmp_path}', 'mlflow=off']!r})\n"
        "print(sorted(m for m in ('haystack', 'pymilvus') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=False)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
