"""
`knowledge compare --a ... --b ...`: two configs over a labelled query set, paired query by query.
A config against itself changes nothing (p = 1); a threshold that rejects everything is a drop
with p < 0.05; the HTML report and the MLflow run carry both configs.
"""

import json

from pipelines.cli import main
from tests.conftest import EVAL_DIR

QUERIES = str(EVAL_DIR / "sample-kb.jsonl")
REJECT_ALL = "retrieval.evidence_threshold=0.99 retrieval.uncovered_evidence_threshold=0.99"


def _ab(capsys, sample_cfg, *args):
    state = [f"paths.state_dir={sample_cfg.paths.state_dir}", f"kb.path={sample_cfg.kb.path}"]
    code = main(["compare", "--queries", QUERIES, "--json", *args, *state])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_a_config_against_itself_changes_nothing(sample_cfg, tmp_path, capsys):
    report_file = tmp_path / "same.html"
    payload = _ab(capsys, sample_cfg, "--a", "", "--b", "", "--report", str(report_file), "mlflow=off")
    assert payload["changes"] == []
    assert {"hit@1", "answer_rate", "no_evidence_rate"} <= set(payload["metrics"])
    for metric in payload["metrics"].values():
        assert metric["delta"] == 0 and metric["p_value"] == 1.0 and metric["b_better"] == metric["b_worse"] == 0
    assert "0 queries whose top source or answer changed" in report_file.read_text(encoding="utf-8")
    assert payload["verdict"].startswith("no detectable difference (n=8, p=1)")
    # The configured guard set is scored on both sides and shown beside the compared queries.
    assert "no_evidence_rate@offtopic-alerts" in payload["metrics"]


def test_a_config_that_rejects_everything_is_a_significant_drop(sample_cfg, mlflow_store, capsys):
    from mlflow import MlflowClient

    tracking = ["mlflow=sqlite", f"mlflow.tracking_uri={mlflow_store}"]
    payload = _ab(capsys, sample_cfg, "--b", REJECT_ALL, *tracking)
    answered, hit = payload["metrics"]["answer_rate"], payload["metrics"]["hit@1"]
    assert answered["a"] > 0 and answered["b"] == 0 and answered["delta"] < 0 and answered["p_value"] < 0.05
    assert hit["delta"] < 0 and hit["p_value"] < 0.05 and hit["ci_high"] < 0
    assert payload["metrics"]["no_evidence_rate"]["b"] == 1.0
    assert {change["b_top"] for change in payload["changes"]} == {None}
    assert len(payload["changes"]) == answered["n"]  # every answered query lost its answer
    assert payload["verdict"].startswith("B is worse (n=8, p=0.0078")

    run = MlflowClient(mlflow_store).get_run(payload["run_id"])
    assert run.data.params["b.retrieval.evidence_threshold"] == "0.99"
    assert run.data.params["a.retrieval.evidence_threshold"] == str(sample_cfg.retrieval.evidence_threshold)
    assert run.data.metrics["delta.answer_rate"] == answered["delta"]


def test_bad_ab_input_is_one_line(sample_cfg, capsys):
    state = [f"paths.state_dir={sample_cfg.paths.state_dir}", "mlflow=off"]
    assert main(["compare", "--queries", QUERIES, "--b", "retrieval.top_k", *state]) == 2
    assert capsys.readouterr().err.strip() == "knowledge: error: --b: 'retrieval.top_k' is not key=value"
    assert main(["compare", "--queries", QUERIES, "--b", "retrieval.top_k=zero", *state]) == 2
    assert "retrieval.top_k" in capsys.readouterr().err


def test_the_table_gives_one_verdict_the_guard_metrics_and_small_p_values_as_below_0_001(sample_cfg, capsys):
    state = [f"paths.state_dir={sample_cfg.paths.state_dir}", f"kb.path={sample_cfg.kb.path}", "mlflow=off"]
    # Every answer is lost and every alert of the guard set rejected: the guard's p-value is far below 0.001.
    assert main(["compare", "--queries", QUERIES, "--b", REJECT_ALL, *state]) == 0
    out = capsys.readouterr().out.splitlines()
    verdicts = [line for line in out if line.startswith(("B is better", "B is worse", "no detectable difference"))]
    assert verdicts == [next(line for line in out if line.startswith("B is worse (n=8, p=0.0078"))]
    guard_row = next(line for line in out if line.startswith("no_evidence_rate@offtopic-alerts"))
    assert guard_row.split()[1] == "46"
