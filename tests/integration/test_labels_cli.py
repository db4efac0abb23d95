"""
`knowledge traces label` and `knowledge labels list|export|import`, in process, over real trace
databases: a label lands once, a later one supersedes, bad input is one line and exit 2, a label
written while the database is away is spooled and replayed, and the export splits stably.
"""

import json
import subprocess
import sys
import uuid
from collections import Counter
from datetime import UTC, datetime

import pytest

from components.tracing.trace_store import TraceStore
from pipelines.labels.split import label_split, normalised_query
from tests.conftest import state_overrides
from tests.helpers import REPO, child_env, run_main

DEV = REPO / "eval" / "prometheus-dev.jsonl"
# The label commands read and write the trace database only: none of these loads.
RETRIEVAL_STACK = ("haystack", "pymilvus", "onnxruntime", "mlflow", "torch")


@pytest.fixture(scope="module")
def lookup_id(sample_service) -> str:
    return sample_service.lookup("disk almost full on a worker node").invocation_id


@pytest.fixture
def overrides(sample_cfg):
    return state_overrides(sample_cfg.paths.state_dir)


def own_database(tmp_path, sample_cfg, *extra: str) -> list[str]:
    """Overrides of a trace database of the test's own, checking sources against the session's index."""
    return state_overrides(tmp_path / "state", f"l0.index_path={sample_cfg.l0.index_path}", *extra)


def invocation(query: str) -> dict:
    return {
        "id": str(uuid.uuid4()),
        "tool_name": "lookup_knowledge",
        "arguments": {"query": query},
        "status": "ok",
        "found": True,
        "retrieval_layer": "L1",
        "latency_ms": 1.0,
        "created_at": datetime.now(tz=UTC),
        "error": None,
        "retrieval_details": {"evidence_blocks": [{"source": "disk/disk-full.md"}]},
    }


def test_a_cli_label_lands_once_and_a_later_one_supersedes(lookup_id, sample_cfg, overrides, capsys):
    done = run_main(capsys, "traces", "label", lookup_id, "--source", "disk/disk-full.md", *overrides)
    assert done.returncode == 0 and done.stdout.startswith("recorded right_sources label") and done.stderr == ""
    done = run_main(capsys, "traces", "label", lookup_id[:10], "--off-topic", "--reviewer", "bob", *overrides)
    assert done.returncode == 0 and "recorded off_topic" in done.stdout
    store = TraceStore(sample_cfg.trace.db_url, sample_cfg.trace.spool_path)
    labels = store.labels(lookup_id)
    assert [(label["verdict"], label["sources"], label["origin"]) for label in labels] == [
        ("right_sources", ["disk/disk-full.md"], "cli"),
        ("off_topic", [], "cli"),
    ]
    assert labels[1]["reviewer"] == "bob" and labels[0]["query"] == "disk almost full on a worker node"
    listed = run_main(capsys, "labels", "list", *overrides).stdout.splitlines()
    assert "bob" in listed[1] and "off_topic" in listed[1]
    assert "right_sources *" in listed[2] and listed[-1].startswith("* superseded")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["00000000-nope", "--none"], "no invocation '00000000-nope'"),
        (["{id}", "--source", "disk/nope.md"], "source 'disk/nope.md' is not in the index"),
        (["{id}", "--none", "--off-topic"], "give one verdict"),
        (["{id}", "--source", "disk/disk-full.md", "--none"], "give one verdict"),
        (["{id}"], "give one verdict"),
    ],
)
def test_bad_label_input_is_one_line_and_exit_2(lookup_id, overrides, capsys, argv, message):
    done = run_main(capsys, "traces", "label", *[a.format(id=lookup_id) for a in argv], *overrides)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr


def test_a_label_while_the_database_is_away_is_spooled_then_replayed(tmp_path, sample_cfg, capsys):
    overrides = own_database(tmp_path, sample_cfg, f"trace.db_url=sqlite:///{tmp_path}/db/traces.db")
    recorded = invocation("disk almost full")
    TraceStore(f"sqlite:///{tmp_path}/db/traces.db", str(tmp_path / "unused.jsonl")).write(recorded)
    (tmp_path / "db").rename(tmp_path / "away")
    (tmp_path / "db").write_text("a file where the database folder should be")
    done = run_main(capsys, "traces", "label", recorded["id"], "--source", "disk/disk-full.md", *overrides)
    assert done.returncode == 0 and done.stdout.startswith("spooled right_sources label")
    assert "not checked" in done.stderr and "traces replay" in done.stderr
    (tmp_path / "db").unlink()
    (tmp_path / "away").rename(tmp_path / "db")  # the database is back
    done = run_main(capsys, "traces", "replay", *overrides)
    assert done.returncode == 0 and "replayed 1 spooled record(s)" in done.stdout and "1 new" in done.stdout
    listed = run_main(capsys, "labels", "list", *overrides).stdout
    assert "right_sources" in listed and "disk almost full" in listed


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_export_merges_duplicates_reports_contradictions_and_splits_stably(tmp_path, sample_cfg, capsys):
    overrides = own_database(tmp_path, sample_cfg)
    write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"query": "Disk almost  FULL", "relevant": ["disk/disk-full.md"], "kind": "answerable"},
            {"query": "pg replica lag", "relevant": ["database/postgresql-replication-lag.md"]},
            {"query": "sourdough starter", "relevant": [], "kind": "off_topic"},
        ],
    )
    write_jsonl(
        tmp_path / "b.jsonl",
        [
            {"query": "disk almost full", "relevant": ["disk/disk-full.md"], "kind": "answerable"},
            {"query": "PG replica lag", "relevant": [], "kind": "off_topic"},
        ],
    )
    for name, reviewer in (("a.jsonl", "alice"), ("b.jsonl", "bob")):
        done = run_main(capsys, "labels", "import", str(tmp_path / name), "--reviewer", reviewer, *overrides)
        assert done.returncode == 0, done.stderr
    again = run_main(capsys, "labels", "import", str(tmp_path / "a.jsonl"), "--reviewer", "alice", *overrides)
    assert "0 new" in again.stdout  # importing twice stores nothing twice

    first = run_main(capsys, "labels", "export", "--out", str(tmp_path / "one"), *overrides)
    second = run_main(capsys, "labels", "export", "--out", str(tmp_path / "two"), *overrides)
    assert first.returncode == 0 and first.stdout == second.stdout
    for split in ("train", "check"):
        assert (tmp_path / "one" / f"{split}.jsonl").read_bytes() == (tmp_path / "two" / f"{split}.jsonl").read_bytes()
    rows = {split: read_jsonl(tmp_path / "one" / f"{split}.jsonl") for split in ("train", "check")}
    exported = {normalised_query(row["query"]): (split, row) for split, side in rows.items() for row in side}
    assert set(exported) == {"disk almost full", "sourdough starter"}  # the contradiction is left out
    assert all(split == label_split(query) for query, (split, _) in exported.items())
    assert exported["sourdough starter"][1] | {"id": ""} == {
        "id": "",
        "query": "sourdough starter",
        "relevant": [],
        "kind": "off_topic",
    }
    assert "duplicates merged: 1 queries\n  2x Disk almost  FULL" in first.stdout
    assert (
        "contradictions left out: 1 queries\n  pg replica lag: database/postgresql-replication-lag.md; off_topic"
        in (first.stdout)
    )


def test_an_imported_eval_set_exports_as_itself_split_by_query(tmp_path, sample_cfg, capsys):
    overrides = own_database(tmp_path, sample_cfg)
    done = run_main(capsys, "labels", "import", str(DEV), "--reviewer", "dev-set", *overrides)
    assert done.returncode == 0, done.stderr
    run_main(capsys, "labels", "export", "--out", str(tmp_path / "out"), *overrides)
    dev = {normalised_query(row["query"]): row for row in read_jsonl(DEV)}
    sides = {split: read_jsonl(tmp_path / "out" / f"{split}.jsonl") for split in ("train", "check")}
    exported = {normalised_query(row["query"]): (split, row) for split, rows in sides.items() for row in rows}
    assert set(exported) == set(dev)
    assert not {normalised_query(r["query"]) for r in sides["train"]} & {
        normalised_query(r["query"]) for r in sides["check"]
    }
    for query, (split, row) in exported.items():
        assert split == label_split(query)
        assert sorted(row["relevant"]) == sorted(dev[query]["relevant"]) and row["kind"] == dev[query]["kind"]
    assert Counter(split for split, _ in exported.values())["check"] > 0


def test_the_label_commands_load_no_retrieval_stack(tmp_path, sample_cfg):
    overrides = own_database(tmp_path, sample_cfg)
    recorded = invocation("disk almost full")
    TraceStore(f"sqlite:///{tmp_path}/state/traces.db", str(tmp_path / "unused.jsonl")).write(recorded)
    commands = [
        ["labels", "import", str(DEV), "--reviewer", "dev-set"],
        ["traces", "label", recorded["id"], "--source", "disk/disk-full.md"],
        ["traces", "label", recorded["id"], "--off-topic"],
        ["labels", "list", "--last", "3"],
        ["labels", "export", "--out", str(tmp_path / "out")],
    ]
    script = (
        "import sys\n"
        "from pipelines.cli import main\n"
        f"codes = [main([*argv, *{overrides!r}]) for argv in {commands!r}]\n"
        f"print(codes, [m for m in {RETRIEVAL_STACK!r} if m in sys.modules], file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "[0, 0, 0, 0, 0] []"
