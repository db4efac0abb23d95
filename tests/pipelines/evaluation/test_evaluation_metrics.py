"""Evaluation metrics: hand-computed on a toy ranking, and cross-checked against MLflow's retriever evaluation."""

import math
import random

import pytest

from components.stores.l0_index import L0Entry, L0Index
from components.stores.l0_index_file import save_l0_index
from pipelines.evaluation.metrics import EvalQuery, Ranked, filter_report, format_metrics, ndcg, recall, score
from pipelines.tuning.runs import evaluation_metrics, flatten_metrics, metric_name


def _q(relevant, kind="answerable"):
    return EvalQuery(query="q", relevant=set(relevant), kind=kind)


def toy():
    queries = [_q({"a"}), _q({"a", "y"}), _q({"z"}), _q({"b"}), _q(set(), "off_topic"), _q(set(), "off_topic")]
    answers = [
        Ranked(["a", "b", "c"], True, {"fallback": None}, latency_ms=10.0),
        Ranked(["x", "a", "y"], True, {"fallback": "filtered_vector_empty"}, latency_ms=20.0),
        Ranked(["q", "r", "s"], True, {"fallback": None}, latency_ms=30.0),
        Ranked([], False, {"fallback": "filtered_vector_low_quality"}, latency_ms=40.0),
        Ranked([], False, {"fallback": None}, latency_ms=50.0),
        Ranked(["a"], True, {"fallback": "filtered_vector_low_quality"}, latency_ms=60.0),
    ]
    return queries, answers


def test_metrics_of_a_toy_ranking_match_hand_computed_values():
    metrics = score(*toy())

    # First relevant ranks of the 4 answerable queries: 1, 2, none, none (not answered).
    assert metrics["answerable"] == 4 and metrics["off_topic"] == 2
    assert metrics["hit@1"] == 0.25
    assert metrics["hit@5"] == 0.5
    assert metrics["mrr@10"] == round((1 + 1 / 2) / 4, 4)
    # nDCG of query 2: (1/log2(3) + 1/log2(4)) / (1 + 1/log2(3)).
    second = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))
    assert metrics["ndcg@10"] == round((1 + second) / 4, 4)
    assert metrics["recall@10"] == round((1 + 1) / 4, 4)
    assert metrics["answer_rate"] == 0.75
    assert metrics["no_evidence_rate"] == 0.5
    assert metrics["fallback_rate"] == 0.5
    assert metrics["fallback_rate_by_reason"] == {
        "filtered_vector_empty": round(1 / 6, 4),
        "filtered_vector_low_quality": round(2 / 6, 4),
    }
    # Linear interpolation over 10..60 ms: p50 between 30 and 40, p95 at 57.5.
    assert metrics["latency_p50_ms"] == 35.0 and metrics["latency_p95_ms"] == 57.5


def test_hit_at_1_by_style_scores_each_style_of_answerable_query_on_its_own():
    queries = [_q({"a"}), _q({"b"}), _q({"c"}), _q(set(), "off_topic")]
    for query, style in zip(queries, ("alert", "alert", "engineer", "engineer"), strict=True):
        query.style = style
    answers = [Ranked(["a"], True), Ranked(["x", "b"], True), Ranked(["c"], True), Ranked([], False)]
    # alert: hit at rank 1, then at rank 2; engineer: one answerable query, hit at rank 1.
    assert score(queries, answers)["hit@1_by_style"] == {"alert": 0.5, "engineer": 1.0}
    queries[2].style = "alert"
    assert "hit@1_by_style" not in score(queries, answers)  # one style: nothing to compare


def test_the_table_has_a_row_per_system_the_styles_and_the_gain_over_the_baselines():
    queries, answers = toy()
    systems = {"pipeline": score(queries, answers), "dense": {"hit@1": 0.0}, "hybrid": {"hit@1": None}}
    systems["pipeline"]["hit@1_by_style"] = {"alert": 0.25, "engineer": 0.75}
    systems["dense"]["hit@1_by_style"] = {"alert": 0.0, "engineer": 0.5}
    systems["hybrid"]["hit@1_by_style"] = {"alert": None, "engineer": 0.5}
    lines = format_metrics({"queries": "toy", "evidence_threshold": 0.35, "systems": systems}).splitlines()
    assert lines[0] == "toy: 4 answerable, 2 off-topic queries (evidence threshold 0.35)"
    assert lines[1].split() == ["system", "hit@1", "hit@5", "mrr@10", "answer_rate", "no_evidence_rate"]
    assert lines[2].split() == ["pipeline", "0.250", "0.500", "0.375", "0.750", "0.500"]
    assert lines[3].split() == ["dense", "0.000", "-", "-", "-", "-"]
    assert lines[4].split() == ["hybrid", "-", "-", "-", "-", "-"]
    assert lines[5] == "hit@1 by style of query (the `style` field):"
    assert lines[6].split() == ["alert", "pipeline", "0.250", "dense", "0.000", "hybrid", "-"]
    assert lines[7].split() == ["engineer", "pipeline", "0.750", "dense", "0.500", "hybrid", "0.500"]
    assert lines[8] == "hit@1 gain of the pipeline: +25.0 points over dense, +25.0 over hybrid"
    assert len(lines) == 9


def test_the_domain_filter_report_counts_its_precision_and_hit_at_1_with_and_without_it(tmp_path):
    path = tmp_path / "kb.l0.json"
    entries = [L0Entry("a.md", "A", "alerts"), L0Entry("b.md", "B", "alerts"), L0Entry("c.md", "C", "operator")]
    save_l0_index(L0Index(entries), path)
    queries = [_q({"a.md"}), _q({"c.md"}), _q({"b.md"}), _q(set(), "off_topic")]
    answers = {
        # Filtered on "alerts" (right), on "alerts" (wrong: c.md is the operator's), none, off-topic filtered.
        "pipeline": [
            Ranked(["a.md"], True, {"filter": "alerts"}),
            Ranked(["a.md", "c.md"], True, {"filter": "alerts"}),
            Ranked(["b.md"], True, {"filter": None}),
            Ranked(["a.md"], True, {"filter": "alerts"}),
        ],
        "unfiltered": [Ranked(["a.md"], True), Ranked(["c.md"], True), Ranked(["b.md"], True), Ranked([], False)],
    }
    report = filter_report(queries, answers, str(path))
    assert report == {
        "filtered_queries": 2,
        "filter_precision": 0.5,
        "hit@1_filtered": 0.5,
        "hit@1_unfiltered": 1.0,
    }
    lines = format_metrics(
        {
            "queries": "q",
            "evidence_threshold": 0.35,
            "systems": {"pipeline": score(queries, answers["pipeline"])},
            "domain_filter": report,
        }
    )
    assert (
        "domain filter: 2 answerable queries filtered, filter precision 0.500, hit@1 on them 0.500 filtered vs 1.000 unfiltered"
        in lines
    )
    assert evaluation_metrics({"systems": {}, "domain_filter": report})["domain_filter.filter_precision"] == 0.5


def test_mlflow_names_and_baseline_prefixes():
    assert metric_name("hit@1") == "hit_at_1"
    report = {"systems": {"pipeline": {"hit@1": 0.5, "fallback_rate_by_reason": {"x": 0.1}}, "dense": {"hit@1": 0.25}}}
    assert evaluation_metrics(report) == {"hit_at_1": 0.5, "fallback_rate_by_reason.x": 0.1, "dense.hit_at_1": 0.25}
    assert flatten_metrics({"answer_rate": None, "ok": True}) == {}


def test_ndcg_and_recall_agree_with_mlflow_retriever_evaluation(mlflow_store, tmp_path, monkeypatch):
    """An independent implementation on the same rankings: mlflow.models.evaluate(model_type="retriever")."""
    import mlflow
    import pandas as pd

    rng = random.Random(7)
    documents = [f"d{i}" for i in range(12)]
    rankings, truths = [], []
    for _ in range(25):
        rankings.append(rng.sample(documents, rng.randint(0, 10)))
        truths.append(rng.sample(documents, rng.randint(1, 3)))
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(mlflow_store)
    try:
        experiment = mlflow.set_experiment("metrics-cross-check")
        with mlflow.start_run(experiment_id=experiment.experiment_id):
            result = mlflow.models.evaluate(
                data=pd.DataFrame({"retrieved": rankings, "truth": truths}),
                model_type="retriever",
                targets="truth",
                predictions="retrieved",
                evaluator_config={"retriever_k": 10},
            )
    finally:
        mlflow.set_tracking_uri(None)
    ours_ndcg = sum(ndcg(r, set(t), 10) for r, t in zip(rankings, truths, strict=True)) / len(rankings)
    ours_recall = sum(recall(r, set(t), 10) for r, t in zip(rankings, truths, strict=True)) / len(rankings)
    assert ours_ndcg == pytest.approx(result.metrics["ndcg_at_10/mean"], abs=1e-9)
    assert ours_recall == pytest.approx(result.metrics["recall_at_10/mean"], abs=1e-9)
    # score() reports the same means over answerable queries (rounded to 4 places).
    metrics = score([_q(t) for t in truths], [Ranked(r, True) for r in rankings])
    assert metrics["ndcg@10"] == round(ours_ndcg, 4) and metrics["recall@10"] == round(ours_recall, 4)
