"""
`knowledge lookup` and `knowledge eval` on the command line: one real subprocess (as a user runs
it), the rest in-process through `pipelines.cli.main` (imports cost ~15 s per process).
"""

import json

import pytest

from pipelines.cli import main
from pipelines.config.settings import load_config
from pipelines.indexing import run_indexing
from tests.conftest import state_overrides
from tests.helpers import run_cli, stderr_lines
from tests.lookup_kbs import write_two_topic_kb

TOMATO_QUERY = "how much should I water tomato plants in the garden"
DISK_QUERY = "disk almost full on a worker node"


def _state(cfg) -> list[str]:
    return [f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off"]


@pytest.fixture(scope="module")
def released_topics_state(tmp_path_factory):
    """
    The two-topic KB indexed into its own state folder, whose Milvus Lite db this process then
    releases: Milvus Lite lets one process hold a db, and the CLI runs in another.
    """
    from milvus_lite.server_manager import server_manager_instance

    root = tmp_path_factory.mktemp("cli-topics")
    kb = write_two_topic_kb(root / "kb")
    cfg = load_config(state_overrides(root / "state", f"kb.path={kb}"))
    run_indexing(cfg, rebuild=True)
    server_manager_instance.release_server(cfg.milvus.uri)
    return root, cfg


def test_cli_lookup_subprocess_with_an_override(released_topics_state):
    """An override (no code change) forces the unfiltered retry, visible in the printed JSON."""
    root, cfg = released_topics_state
    result = run_cli("lookup", TOMATO_QUERY, *_state(cfg), "retrieval.reference_threshold=0.95", cwd=root)
    assert result.returncode == 0, result.stderr
    assert not [line for line in stderr_lines(result) if "error" in line.lower()]
    data = json.loads(result.stdout)
    assert data["found"] is True and data["evidenceBlocks"][0]["source"] == "gardening/watering-tomatoes.md"
    trace = data["retrievalTrace"]
    assert trace["fallbackReason"] == "filtered_vector_low_quality"
    assert [a["category"] for a in trace["attempts"]] == ["gardening", None]


def test_cli_lookup_prints_the_result_json(topics_cfg, capsys):
    assert main(["lookup", TOMATO_QUERY, *_state(topics_cfg)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["found"] is True and data["evidenceStatus"] == "evidence"
    for key in (
        "evidenceBlocks",
        "contextPack",
        "retrievalTrace",
        "rerankTrace",
        "relevanceLevel",
        "completenessHint",
        "l0Hints",
    ):
        assert key in data
    # Without the override the filtered attempt stands: the threshold is config, not code.
    assert "fallbackReason" not in data["retrievalTrace"] and len(data["retrievalTrace"]["attempts"]) == 1


def test_cli_lookup_batch_plain_lines_and_jsonl(topics_cfg, tmp_path, capsys):
    batch = tmp_path / "queries.txt"
    batch.write_text(
        f"{TOMATO_QUERY}\n\n"
        + json.dumps({"query": "how do I hand over the on-call pager", "id": "q2"})
        + "\n"
        + "how do I bake sourdough bread\n",
        encoding="utf-8",
    )
    assert main(["lookup", "--batch", str(batch), *_state(topics_cfg), "retrieval.reference_threshold=0.95"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3  # one JSON line per query, the blank line skipped
    results = [json.loads(line) for line in lines]
    assert [r["queryTransform"]["normalized"] for r in results] == [
        TOMATO_QUERY,
        "how do I hand over the on-call pager",
        "how do I bake sourdough bread",
    ]
    assert [r["found"] for r in results] == [True, True, False]
    assert results[0]["retrievalTrace"]["fallbackReason"] == "filtered_vector_low_quality"


def test_cli_lookup_batch_reports_a_bad_query_and_exits_2(topics_cfg, tmp_path, capsys):
    batch = tmp_path / "queries.jsonl"
    batch.write_text(json.dumps({"query": "   "}) + "\n" + json.dumps({"query": TOMATO_QUERY}) + "\n", encoding="utf-8")
    assert main(["lookup", "--batch", str(batch), *_state(topics_cfg)]) == 2
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert "empty" in first["error"] and second["found"] is True


def test_knowledge_eval_smoke(sample_cfg, tmp_path, capsys):
    queries = tmp_path / "labelled.jsonl"
    rows = [
        {"query": DISK_QUERY, "relevant": ["disk/disk-full.md"], "kind": "answerable", "style": "engineer"},
        {
            "query": "postgres replica is lagging behind the primary",
            "relevant": ["database/postgresql-replication-lag.md"],
            "style": "alert",
        },
        {"query": "how do I bake sourdough bread", "relevant": [], "kind": "off_topic"},
    ]
    queries.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert main(["eval", "--queries", str(queries), *_state(sample_cfg)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "2 answerable, 1 off-topic" in lines[0]
    header = lines[1].split()
    assert header == ["system", "hit@1", "hit@5", "mrr@10", "answer_rate", "no_evidence_rate"]
    rows_by_system = {line.split()[0]: line.split()[1:] for line in lines[2:6]}
    assert set(rows_by_system) == {"pipeline", "unfiltered", "dense", "hybrid"}
    for cells in rows_by_system.values():
        assert len(cells) == 5 and all(0.0 <= float(cell) <= 1.0 for cell in cells)
    assert rows_by_system["pipeline"] == ["1.000", "1.000", "1.000", "1.000", "1.000"]
    # Queries of several styles get a hit@1 line per style, one cell per system.
    assert lines[6] == "hit@1 by style of query (the `style` field):"
    by_style = {line.split()[0]: line.split()[1:] for line in lines[7:9]}
    assert set(by_style) == {"alert", "engineer"}
    assert by_style["alert"][:2] == ["pipeline", "1.000"]
    assert by_style["alert"][2::2] == ["unfiltered", "dense", "hybrid"]


def test_cli_lookup_agent_view_prints_context_and_citations_only(topics_cfg, capsys):
    assert main(["lookup", "--view", "agent", "--compact", TOMATO_QUERY, *_state(topics_cfg)]) == 0
    view = json.loads(capsys.readouterr().out)
    assert set(view) >= {"found", "evidenceStatus", "relevanceLevel", "completenessHint", "context", "citations"}
    assert not {"retrievalTrace", "rerankTrace", "evidenceBlocks", "queryTransform"} & set(view)
    assert view["invocationId"]
