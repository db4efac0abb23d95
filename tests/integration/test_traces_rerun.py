"""
`knowledge traces rerun`: recorded lookups asked again under a changed config. The queries it
reports as changed are exactly those whose decision a direct lookup under that config changes,
and the reruns leave the trace table as it was.
"""

import json

import pytest

from pipelines.cli import main
from pipelines.config.settings import load_config
from pipelines.state.traces import open_store
from pipelines.tuning.rerun import decision, rerun_traces
from tests.conftest import EVAL_DIR
from tests.helpers import derived_config, looks_up

SAMPLE_QUERIES = (EVAL_DIR / "sample-kb.jsonl").read_text(encoding="utf-8").splitlines()
QUERIES = [json.loads(line)["query"] for line in SAMPLE_QUERIES if line.strip()] + [
    "pods restart in a loop",
    "tls certificate expires tomorrow",
    "kafka consumer lag growing",
    "redis evicting keys",
    "how to bake sourdough bread",
    "node memory pressure",
    "dns resolution fails intermittently",
    "queue backlog grows",
    "deployment rollout stuck",
    "best pizza in town",
]
CHANGE = "retrieval.evidence_threshold=0.5"


@pytest.fixture(scope="module")
def recorded(sample_cfg, tmp_path_factory):
    """20 lookups recorded into a trace database of their own; returns (its overrides, the results)."""
    from pipelines.lookup import LookupService

    trace = [f"trace.db_url=sqlite:///{tmp_path_factory.mktemp('rerun')}/traces.db", "trace.retry_interval_s=0"]
    service = LookupService(derived_config(sample_cfg, *trace))
    return trace, [service.lookup(query) for query in QUERIES]


def _decision(result) -> dict:
    return decision(result.found, result.retrieval_details(0))


def _count(cfg) -> int:
    from pipelines.state.traces import open_store

    return open_store(cfg).count()


def test_rerun_reports_exactly_the_queries_whose_decision_changed(sample_cfg, recorded):
    trace, results = recorded
    assert len(results) == 20
    cfg = derived_config(sample_cfg, *trace, CHANGE)
    before = _count(cfg)

    report = rerun_traces(cfg)

    changed = looks_up(sample_cfg, CHANGE)
    direct = {q: changed(q) for q in QUERIES}
    expected = {
        query
        for query, before_change in zip(QUERIES, results, strict=True)
        if _decision(before_change) != _decision(direct[query])
    }
    assert 0 < len(expected) < len(QUERIES)  # the change matters to some queries, not all
    assert {row.query for row in report.changed} == expected
    assert report.totals["queries"] == 20 and report.totals["changed"] == len(expected)
    assert report.totals["found_lost"] == sum(1 for q in expected if not direct[q].found)
    assert _count(cfg) == before  # the reruns were not recorded


def test_rerun_under_the_recorded_config_changes_nothing_and_logs_a_run(sample_cfg, recorded, mlflow_store, capsys):
    from mlflow import MlflowClient

    trace, _ = recorded
    state = [f"paths.state_dir={sample_cfg.paths.state_dir}", "mlflow=sqlite", f"mlflow.tracking_uri={mlflow_store}"]
    code = main(["traces", "rerun", "--last", "20", "--json", *state, *trace])
    out, err = capsys.readouterr()
    assert code == 0, err
    payload = json.loads(out)
    assert payload["totals"]["queries"] == 20 and payload["totals"]["changed"] == 0
    run = MlflowClient(mlflow_store).get_run(payload["run_id"])
    assert run.data.metrics["changed"] == 0 and run.data.params["retrieval.evidence_threshold"] == str(
        sample_cfg.retrieval.evidence_threshold
    )


def test_rerun_bad_input_is_one_line(sample_cfg, tmp_path, capsys):
    state = [f"paths.state_dir={sample_cfg.paths.state_dir}", "mlflow=off"]
    assert main(["traces", "rerun", "--since", "last tuesday", *state]) == 2
    assert capsys.readouterr().err.startswith("knowledge: error: --since 'last tuesday' is not a date")
    empty = f"trace.db_url=sqlite:///{tmp_path}/empty.db"
    assert main(["traces", "rerun", *state, empty]) == 2  # reading never creates the database
    assert "no trace database at" in capsys.readouterr().err and not (tmp_path / "empty.db").exists()
    open_store(load_config([*state, empty])).ensure_schema()
    assert main(["traces", "rerun", *state, empty]) == 2
    assert "no recorded lookup to rerun" in capsys.readouterr().err
