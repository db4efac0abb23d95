"""
`knowledge bench all` at tiny sizes: the shape of its table, JSON and MLflow run (not its speed),
the parts left out saying so, and bad options exiting 2 in one line.
"""

import json

import mlflow
import pytest

from pipelines.bench.all import numeric_leaves
from pipelines.bench.all_table import PARTS, format_table, table_rows
from pipelines.cli import main
from tests.conftest import state_overrides

TINY = ["--base-chunks", "340", "--scale-chunks", "400", "--sidecar-lookups", "2", "--scale-lookups", "2"]


def test_bench_all_tiny_prints_the_table_writes_json_and_logs_a_run(mlflow_store, tmp_path, capsys):
    output = tmp_path / "bench.json"
    skips = ["--skip", "index", "--skip", "lookup", "--skip", "cold_start"]
    overrides = state_overrides(tmp_path / "state", f"mlflow.tracking_uri='{mlflow_store}'")
    assert main(["bench", "all", *TINY, *skips, "--output", str(output), *overrides]) == 0
    printed = capsys.readouterr().out

    report = json.loads(output.read_text())
    assert [row["part"] for row in report["table"]] == [
        "index",
        "lookup",
        "sidecar",
        "serve",
        "scale",
        "scale",
        "cold_start",
    ]
    by_part = {row["part"]: row for row in report["table"]}
    assert by_part["index"]["value"] == "skipped (--skip)" and by_part["cold_start"]["verdict"] == "-"
    assert by_part["serve"]["value"] == "not run (no --serve-url)"
    assert by_part["sidecar"]["ratio"] > 0 and by_part["sidecar"]["target"] == "<= 1.2"
    scale = report["parts"]["scale"]
    assert scale["base"]["chunks"] == 340 and scale["scale"]["chunks"] == 400
    assert scale["real_chunks"] < 340 and "synthetic" in scale["vectors"]
    assert report["parts"]["sidecar"]["chunks"] == 400 and report["parts"]["sidecar"]["on"]["p50_ms"] > 0

    for line in ("part", "sidecar", "scale", "not run (no --serve-url)", f"MLflow run {report['run_id']}"):
        assert line in printed
    run = mlflow.MlflowClient(mlflow_store).get_run(report["run_id"])
    assert run.data.metrics["scale.scale.chunks"] == 400
    assert run.data.params["skip"] == str(("index", "lookup", "cold_start"))


def test_every_part_skipped_gives_one_row_each():
    rows = table_rows({})
    assert [r["part"] for r in rows] == list(PARTS)
    assert format_table(rows).splitlines()[0].split()[:3] == ["part", "figure", "value"]


def test_numeric_leaves_flatten_nested_figures():
    assert numeric_leaves({"a": {"b": 1, "c": [1, 2], "d": True}, "e": "x", "f": 2.5}) == {
        "a.b": 1.0,
        "a.d": 1.0,
        "f": 2.5,
    }


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--skip", "everything"], "--skip everything: parts are"),
        (["--scale-chunks", "10", "--base-chunks", "10"], "--scale-chunks must exceed --base-chunks"),
        (["--min-chunks", "0"], "--min-chunks 0 must be 1 or more"),
        (["--output", "/nonexistent-folder/x.json"], "its folder does not exist"),
    ],
)
def test_bad_options_exit_2_with_one_line(tmp_path, capsys, args, reason):
    assert main(["bench", "all", *args, *state_overrides(tmp_path / "state")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and reason in err[0]


def test_the_cold_start_runs_the_configured_model(tmp_path):
    """`bench all embedder.model=DIR` times that model's cold start, not the packaged one's."""
    from pipelines.bench.all import BenchAllOptions, bench_all

    missing = tmp_path / "no-model"
    others = tuple(part for part in PARTS if part != "cold_start")
    options = BenchAllOptions(cold_runs=1, skip=others)
    with pytest.raises(RuntimeError, match=f"no model folder at {missing}"):
        bench_all([*state_overrides(tmp_path / "state"), f"embedder.model={missing}", "mlflow=off"], options)


def test_the_cold_start_row_names_a_model_that_is_not_the_packaged_one():
    figures = {
        "lookup_median_s": 2.0,
        "bare_import_median_s": 1.6,
        "ratio": 1.25,
        "target_ratio": 1.3,
        "meets_target": True,
    }
    packaged = {**figures, "backend": "onnx", "model": "packaged:all-MiniLM-L6-v2"}
    adapted = {**figures, "backend": "onnx", "model": "/m/adapted", "decision_model": "packaged:all-MiniLM-L6-v2"}
    labels = [table_rows({"cold_start": f})[-1]["figure"] for f in (packaged, adapted)]
    assert labels == ["one-shot knowledge lookup (onnx)", "one-shot knowledge lookup (onnx, /m/adapted)"]
