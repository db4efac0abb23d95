"""
`knowledge compare` over the session's sample collection: one MLflow run in a real sqlite store
with the metrics, the per-query table and the HTML report; bad input exits 2 in one line. And a
lookup with the sidecar on leaves a trace that `search_traces` finds by its sidecar tags.
"""

import csv
import io
import json

import mlflow
import pytest

from components.tracing.mlflow_sink import flush_all
from pipelines.cli import main
from pipelines.evaluation.compare import EXPERIMENT, read_queries
from tests.conftest import sample_overrides, state_overrides

QUERIES = [
    {"id": "disk", "query": "disk almost full on a worker node"},
    {"id": "pg", "query": "postgres replica lag"},
    {"id": "off", "query": "how to bake sourdough bread"},
]


@pytest.fixture
def queries_file(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text("\n".join(json.dumps(q) for q in QUERIES) + "\n\n", encoding="utf-8")
    return path


def compare_overrides(sample_cfg, mlflow_store, tmp_path):
    return state_overrides(
        tmp_path / "state",
        *sample_overrides(
            sample_cfg, f"mlflow.tracking_uri='{mlflow_store}'", f"mlflow.artifact_location={tmp_path}/artifacts"
        ),
    )


def test_compare_logs_one_run_with_metrics_table_and_html(sample_cfg, mlflow_store, queries_file, tmp_path, capsys):
    code = main(
        ["compare", "--queries", str(queries_file), "--top-k", "5", "--json"]
        + compare_overrides(sample_cfg, mlflow_store, tmp_path)
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    client = mlflow.MlflowClient(mlflow_store)
    run = client.get_run(out["run_id"])
    assert client.get_experiment(run.info.experiment_id).name == EXPERIMENT
    metrics = run.data.metrics
    assert metrics["queries"] == 3
    # Both paths search the same collection with the same embedding: they must agree fully.
    assert metrics["rbo_mean"] == pytest.approx(1.0)
    assert metrics["top1_agreement_rate"] == 1.0 and metrics["jaccard_mean"] == 1.0
    assert metrics["similarity_abs_diff_max"] < 1e-4
    assert metrics["sdk_raw_score_mean"] != pytest.approx(metrics["haystack_raw_score_mean"])
    assert run.data.params["sdk_score_label"] != run.data.params["haystack_score_label"]
    assert run.data.params["top_k"] == "5"

    folder = client.download_artifacts(out["run_id"], "", str(tmp_path / "download"))
    rows = list(csv.DictReader(io.StringIO((tmp_path / "download" / "comparison.csv").read_text())))
    assert [r["id"] for r in rows] == ["disk", "pg", "off"] and all(r["sdk_hits"] == "5" for r in rows)
    page = (tmp_path / "download" / "comparison.html").read_text()
    assert page.count("<h2>") == 3 and "sourdough" in page and "same chunk" in page
    assert folder and json.loads((tmp_path / "download" / "comparison.json").read_text())[0]["id"] == "disk"


def test_compare_prints_the_summary_and_the_mlflow_ui_command(sample_cfg, mlflow_store, queries_file, tmp_path, capsys):
    assert (
        main(["compare", "--queries", str(queries_file)] + compare_overrides(sample_cfg, mlflow_store, tmp_path)) == 0
    )
    out = capsys.readouterr().out
    assert "top-1 agreement 100%" in out and f"mlflow ui --backend-store-uri {mlflow_store}" in out


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"text": "no query key"}\n', "not a JSON object with a 'query' field"),
        ('{"query": "  "}\n', "must be a non-empty string"),
        ("\n", "no queries"),
    ],
)
def test_bad_query_files_exit_2_with_one_line(tmp_path, capsys, content, reason):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    assert main(["compare", "--queries", str(path), *state_overrides(tmp_path / "state")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and reason in err[0]


def test_missing_query_file_exits_2(tmp_path, capsys):
    assert main(["compare", "--queries", str(tmp_path / "none.jsonl"), *state_overrides(tmp_path / "s")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_read_queries_numbers_unnamed_queries(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "a"}\n\n{"id": "x", "query": "b"}\n', encoding="utf-8")
    assert read_queries(path) == [{"id": "q1", "query": "a"}, {"id": "x", "query": "b"}]


def test_sidecar_comparison_is_searchable_as_trace_tags(sample_cfg, mlflow_store, tmp_path):
    from pipelines.config.settings import load_config
    from pipelines.lookup import LookupService

    experiment = "lookup-knowledge-sidecar-tags"
    cfg = load_config(
        state_overrides(
            tmp_path / "state",
            *sample_overrides(
                sample_cfg,
                f"trace.db_url=sqlite:///{tmp_path}/traces.db",
                f"mlflow.tracking_uri='{mlflow_store}'",
                f"mlflow.experiment={experiment}",
                f"mlflow.artifact_location={tmp_path}/artifacts",
                "sidecar.enabled=true",
                "mlflow.sample_rate=1.0",
            ),
        )
    )
    result = LookupService(cfg).lookup("disk almost full on a worker node")
    assert result.sidecar.status == "ok"
    assert flush_all(timeout=180)
    client = mlflow.MlflowClient(mlflow_store)
    experiment_id = client.get_experiment_by_name(experiment).experiment_id

    def search(filter_string: str):
        return client.search_traces(locations=[experiment_id], filter_string=filter_string, max_results=100)

    found = search("tags.sidecar_status = 'ok' AND tags.sidecar_top1_agreement = 'true'")
    assert [t.info.tags["invocation_id"] for t in found] == [result.invocation_id]
    tags = found[0].info.tags
    assert tags["sidecar_overlap"] == f"{result.sidecar.comparison['overlap_ratio']:.4f}"
    assert tags["sidecar_path"] == "haystack"
    assert search("tags.sidecar_top1_agreement = 'false'") == []
