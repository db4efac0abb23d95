"""The tuning loop on the sample knowledge base: one eval run, a 2x2 sweep, a 2-trial Optuna search."""

import json
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient

from pipelines.cli import main
from pipelines.config.settings import ConfigError
from pipelines.tuning.sweep import expand, index_redirect
from tests.conftest import EVAL_DIR, sample_overrides

QUERIES = str(EVAL_DIR / "sample-kb.jsonl")


@pytest.fixture
def tracked(sample_cfg, mlflow_store, tmp_path):
    """Overrides onto the indexed sample collection with MLflow runs in the session store; a fresh experiment."""
    experiment = f"eval-{uuid.uuid4().hex[:8]}"
    overrides = sample_overrides(
        sample_cfg,
        f"paths.state_dir={tmp_path / 'state'}",
        f"mlflow.tracking_uri={mlflow_store}",
        f"mlflow.artifact_location={tmp_path / 'artifacts'}",
        "guard.sets=[]",  # the shipped guard set is the runbook corpus's
    )
    return overrides, experiment, MlflowClient(mlflow_store)


def _runs(client, experiment):
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found else []


def test_expand_uses_hydra_sweep_grammar():
    assert expand(["retrieval.reference_threshold=0.3,0.4", "retrieval.top_k=range(10,30,10)", "mlflow=off"]) == [
        ["retrieval.reference_threshold=0.3", "retrieval.top_k=10", "mlflow=off"],
        ["retrieval.reference_threshold=0.3", "retrieval.top_k=20", "mlflow=off"],
        ["retrieval.reference_threshold=0.4", "retrieval.top_k=10", "mlflow=off"],
        ["retrieval.reference_threshold=0.4", "retrieval.top_k=20", "mlflow=off"],
    ]
    assert len(expand(["retrieval.top_k=choice(5,10,20)"])) == 3
    with pytest.raises(ConfigError, match="choice"):
        expand(["retrieval.reference_threshold=interval(0.3,0.5)"])


def test_index_affecting_combinations_get_their_own_collection_files(tmp_path):
    assert index_redirect(["retrieval.top_k=10"], str(tmp_path)) == []
    small = index_redirect(["chunking.max_tokens=100", "retrieval.top_k=10"], str(tmp_path))
    large = index_redirect(["chunking.max_tokens=200", "retrieval.top_k=10"], str(tmp_path))
    assert small != large and all(str(tmp_path / "sweep-index") in o for o in small + large)
    assert small == index_redirect(["retrieval.top_k=20", "chunking.max_tokens=100"], str(tmp_path))


def test_eval_logs_one_run_with_params_metrics_baselines_and_the_per_query_table(tracked, tmp_path, capsys):
    overrides, experiment, client = tracked

    assert main(["eval", "--queries", QUERIES, "--experiment", experiment, *overrides]) == 0

    out = capsys.readouterr().out
    (run,) = _runs(client, experiment)
    assert run.info.run_id in out and "mlflow ui --backend-store-uri sqlite:///" in out
    assert run.data.params["retrieval.reference_threshold"] == "0.5"
    assert run.data.params["rerank.weights.similarity"] == "1.0"
    metrics = run.data.metrics
    for name in ("hit_at_1", "hit_at_5", "mrr_at_10", "ndcg_at_10", "recall_at_10", "answer_rate"):
        assert 0.0 <= metrics[name] <= 1.0 and 0.0 <= metrics[f"dense.{name}"] <= 1.0 and f"hybrid.{name}" in metrics
    assert metrics["no_evidence_rate"] == 1.0 and metrics["answerable"] == 8 and metrics["off_topic"] == 2
    assert metrics["latency_p95_ms"] >= metrics["latency_p50_ms"] > 0
    assert "fallback_rate" in metrics and "dense.fallback_rate" not in metrics
    table_path = Path(client.download_artifacts(run.info.run_id, "per_query.json", str(tmp_path)))
    table = json.loads(table_path.read_text())
    assert {"query", "expected", "retrieved", "first_relevant_rank", "found", "fallback_reason"} <= set(
        table["columns"]
    )
    assert len(table["data"]) == 10


def test_eval_with_mlflow_off_logs_nothing_and_says_so(sample_cfg, tmp_path, capsys):
    overrides = sample_overrides(sample_cfg, f"paths.state_dir={tmp_path}", "mlflow=off")
    assert main(["eval", "--queries", QUERIES, "--no-baselines", *overrides]) == 0
    assert "MLflow is off" in capsys.readouterr().out
    assert not (tmp_path / "mlflow.db").exists()


def test_sweep_overrides_without_m_are_a_clear_usage_error(sample_cfg, tmp_path, capsys):
    overrides = sample_overrides(sample_cfg, f"paths.state_dir={tmp_path}", "mlflow=off")
    assert main(["eval", "--queries", QUERIES, *overrides, "retrieval.top_k=10,20"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "need -m" in err


def test_sweep_makes_one_child_run_per_combination_under_a_parent(tracked, capsys):
    overrides, experiment, client = tracked
    argv = ["eval", "--queries", QUERIES, "--no-baselines", "--experiment", experiment, "--rank-by", "answer_rate"]
    sweep = ["-m", "retrieval.evidence_threshold=0.35,0.9", "retrieval.reference_threshold=0.3,0.6"]

    assert main([*argv, *sweep, *overrides]) == 0

    out = capsys.readouterr().out
    runs = _runs(client, experiment)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 4 + 1  # and the current settings
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    combinations = {
        (r.data.params["retrieval.evidence_threshold"], r.data.params["retrieval.reference_threshold"])
        for r in children
    }
    assert combinations == {("0.35", "0.3"), ("0.35", "0.6"), ("0.9", "0.3"), ("0.9", "0.6"), ("0.35", "0.5")}
    (current,) = [r for r in children if r.data.tags.get("sweep.current") == "true"]
    assert current.data.params["retrieval.reference_threshold"] == "0.5"
    # An evidence bar of 0.9 answers nothing; ranked by answer rate, the 0.35 combinations come first.
    by_bar = {r.data.params["retrieval.evidence_threshold"]: r.data.metrics["answer_rate"] for r in children}
    assert by_bar["0.9"] == 0.0 and by_bar["0.35"] == 1.0
    ranking = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(ranking) == 5 and all("evidence_threshold=0.35" in line for line in ranking[:3])
    # Three settings tie on answer rate with the current settings: nothing to deploy.
    assert parents[0].info.run_id in out and "keep the current settings: " in out


def test_search_runs_trials_as_child_runs_and_reports_the_held_out_split(tracked, capsys):
    overrides, experiment, client = tracked
    argv = ["eval", "--queries", QUERIES, "--search", "thresholds", "--trials", "2", "--seed", "3"]

    assert main([*argv, "--experiment", experiment, *overrides]) == 0
    first = capsys.readouterr().out
    assert main([*argv, "--experiment", experiment, *overrides]) == 0
    second = capsys.readouterr().out

    # 10 queries cannot show a setting better than the current one: the verdict keeps them, the same each time.
    verdicts = [line for line in first.splitlines() if line.startswith(("keep the current settings", "best setting"))]
    assert len(verdicts) == 1 and verdicts[0].startswith("keep the current settings: ")
    assert verdicts[0] in second.splitlines()  # the same seed gives the same search
    assert "best vs defaults, each query set apart" in first
    runs = _runs(client, experiment)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 2 and len(runs) == 2 + 2 * 2
    parent = parents[0]
    assert parent.data.tags["best.kept"] == verdicts[0].removeprefix("keep the current settings: ")
    assert {"holdout.best.hit_at_1", "holdout.default.hit_at_1", "best.hit_at_1"} <= set(parent.data.metrics)
    # The held-out part (30% of 8 answerable + 2 off-topic) is not what the trials were scored on.
    trial = next(r for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert trial.data.metrics["answerable"] + parent.data.metrics["holdout.best.answerable"] == 8


def test_search_of_an_unknown_space_exits_2(sample_cfg, tmp_path, capsys):
    overrides = sample_overrides(sample_cfg, f"paths.state_dir={tmp_path}", "mlflow=off")
    assert main(["eval", "--queries", QUERIES, "search=nope", *overrides]) == 2
    assert "search=nope" in capsys.readouterr().err


def test_eval_with_record_links_each_query_to_its_tool_invocation_row(tracked, tmp_path):
    from pipelines.config.settings import load_config
    from pipelines.state.traces import open_store

    overrides, experiment, client = tracked

    assert (
        main(["eval", "--queries", QUERIES, "--no-baselines", "--record", "--experiment", experiment, *overrides]) == 0
    )

    (run,) = _runs(client, experiment)
    table = json.loads(Path(client.download_artifacts(run.info.run_id, "per_query.json", str(tmp_path))).read_text())
    ids = [row[table["columns"].index("invocation_id")] for row in table["data"]]
    store = open_store(load_config(overrides))
    assert len(ids) == 10 and all(store.get(invocation_id) is not None for invocation_id in ids)

    # The query set is the run's dataset input.
    (dataset_input,) = client.get_run(run.info.run_id).inputs.dataset_inputs
    assert dataset_input.dataset.name == "sample-kb"
    assert {t.key: t.value for t in dataset_input.tags}["mlflow.data.context"] == "evaluation"
    # Each query's trace is in the run's experiment, linked to the run, with its labels.
    traces = client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id, max_results=100)
    assert sorted(t.info.tags["invocation_id"] for t in traces) == sorted(ids)
    queries = {json.loads(line)["query"]: json.loads(line) for line in Path(QUERIES).read_text().splitlines()}
    for found in traces:
        trace = client.get_trace(found.info.trace_id)
        labelled = {a.name: a for a in trace.info.assessments}
        expected = queries[next(s for s in trace.data.spans if s.parent_id is None).inputs["query"]]
        assert labelled["expected_sources"].expectation.value == sorted(expected.get("relevant") or [])
        row = table["data"][ids.index(trace.info.tags["invocation_id"])]
        rank = row[table["columns"].index("first_relevant_rank")]
        if expected.get("relevant"):
            assert labelled["hit_at_1"].feedback.value is (rank == 1)
            if rank is None:  # a miss has no rank to average: no feedback rather than 0
                assert "first_relevant_rank" not in labelled
            else:
                assert labelled["first_relevant_rank"].feedback.value == rank
        else:
            assert labelled["no_evidence"].feedback.value is not row[table["columns"].index("found")]
    # The run spans the evaluation itself, not the moment it was logged.
    assert run.info.start_time <= min(t.info.request_time for t in traces)
    assert run.info.end_time >= max(t.info.request_time + t.info.execution_duration for t in traces)


def test_eval_engine_mlflow_scores_the_pipeline_with_mlflow_genai_evaluate(tracked, capsys):
    overrides, experiment, client = tracked

    assert (
        main(["eval", "--queries", QUERIES, "--engine", "mlflow", "--json", "--experiment", experiment, *overrides])
        == 0
    )

    metrics = json.loads(capsys.readouterr().out)
    (run,) = _runs(client, experiment)
    assert run.data.metrics["hit_at_1/mean"] == pytest.approx(metrics["hit_at_1/mean"])
    assert 0.0 < metrics["hit_at_1/mean"] <= metrics["hit_at_5/mean"] <= 1.0
    assert 0.0 < metrics["reciprocal_rank/mean"] <= 1.0
    # One trace per answerable query, scored, in the run's Traces tab.
    answerable = [line for line in Path(QUERIES).read_text().splitlines() if json.loads(line).get("relevant")]
    traces = client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id, max_results=100)
    assert len(traces) == len(answerable)
    for trace in traces:
        names = {a.name for a in client.get_trace(trace.info.trace_id).info.assessments}
        assert {"hit_at_1", "hit_at_5", "reciprocal_rank", "expected_sources"} <= names
    # The same figures as the builtin evaluation of the pipeline.
    assert main(["eval", "--queries", QUERIES, "--no-baselines", "--json", *overrides, "mlflow.tracking_uri=null"]) == 0
    builtin = json.loads(capsys.readouterr().out)["systems"]["pipeline"]
    assert metrics["hit_at_1/mean"] == pytest.approx(builtin["hit@1"], abs=1e-4)
    assert metrics["hit_at_5/mean"] == pytest.approx(builtin["hit@5"], abs=1e-4)
    assert metrics["reciprocal_rank/mean"] == pytest.approx(builtin["mrr@10"], abs=1e-4)
    # The query file among the run's datasets (MLflow adds the evaluated rows as one of its own).
    assert "sample-kb" in {d.dataset.name for d in client.get_run(run.info.run_id).inputs.dataset_inputs}


def test_rank_by_takes_report_or_mlflow_names_and_refuses_others():
    from pipelines.tuning.ranking import rankable
    from pipelines.tuning.sweep import SweepResult, Trial

    assert rankable("hit_at_1") == rankable("hit@1") == "hit@1"
    with pytest.raises(ConfigError, match="--rank-by 'hit@2'"):
        rankable("hit@2")
    fast, slow = Trial(["a=1"], ["a=1"], {"latency_p95_ms": 5.0}), Trial(["a=2"], ["a=2"], {"latency_p95_ms": 9.0})
    assert SweepResult([slow, fast], None, "latency_p95_ms", None).ranked() == [fast, slow]
