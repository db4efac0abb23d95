"""
`knowledge labels pull`: a reviewer's assessments of a lookup's trace in a real sqlite-store
MLflow become labels of that lookup, once however often they are pulled.
"""

import re
import uuid

import mlflow
import pytest
from mlflow.entities import AssessmentSource

from components.tracing.mlflow_sink import flush_all
from components.tracing.trace_store import TraceStore
from pipelines.config.settings import load_config
from pipelines.lookup import LookupService
from tests.conftest import sample_overrides, state_overrides
from tests.helpers import run_main

EXPERIMENT = f"lookup-knowledge-label-tests-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def traced_lookup(sample_cfg, mlflow_store, tmp_path_factory):
    """(overrides of a traced service's config, its lookup's invocation id, the lookup's MLflow trace id)."""
    state = tmp_path_factory.mktemp("labels-mlflow")
    overrides = state_overrides(
        state,
        *sample_overrides(
            sample_cfg,
            f"trace.db_url=sqlite:///{state}/traces.db",
            f"mlflow.tracking_uri='{mlflow_store}'",
            f"mlflow.experiment={EXPERIMENT}",
            f"mlflow.artifact_location={state}/artifacts",
            "mlflow.sample_rate=1.0",
        ),
    )
    result = LookupService(load_config(overrides)).lookup("disk almost full on a worker node")
    assert flush_all(timeout=180)
    client = mlflow.MlflowClient(mlflow_store)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    [trace] = client.search_traces(
        locations=[experiment.experiment_id], filter_string=f"tags.invocation_id = '{result.invocation_id}'"
    )
    return overrides, result.invocation_id, trace.info.trace_id


def test_assessments_pulled_twice_are_stored_once(traced_lookup, mlflow_store, capsys):
    overrides, invocation_id, trace_id = traced_lookup
    mlflow.set_tracking_uri(mlflow_store)
    mlflow.log_expectation(
        trace_id=trace_id,
        name="expected_sources",
        value=["disk/disk-full.md"],
        source=AssessmentSource(source_type="HUMAN", source_id="dana"),
    )
    mlflow.log_feedback(
        trace_id=trace_id, name="useful", value=False, source=AssessmentSource(source_type="HUMAN", source_id="erin")
    )
    mlflow.log_feedback(trace_id=trace_id, name="tone", value="terse")  # not a label: skipped

    first = run_main(capsys, "labels", "pull", *overrides)
    assert first.returncode == 0, first.stderr
    # At least this lookup's three: the session's store may hold other lookups traced to the experiment.
    pulled = int(re.match(r"pulled (\d+) assessment\(s\): 2 new label\(s\)\n", first.stdout).group(1))
    assert pulled >= 3 and "not a label (other name or value, or overridden)" in first.stdout
    again = run_main(capsys, "labels", "pull", *overrides)
    assert again.stdout.startswith(f"pulled {pulled} assessment(s): 0 new label(s)")
    assert run_main(capsys, "labels", "pull", "--since", "2999-01-01", *overrides).stdout.startswith(
        "pulled 0 assessment(s)"
    )

    cfg = load_config(overrides)
    labels = TraceStore(cfg.trace.db_url, cfg.trace.spool_path).labels(invocation_id)
    assert sorted((label["reviewer"], label["verdict"], label["sources"], label["origin"]) for label in labels) == [
        ("dana", "right_sources", ["disk/disk-full.md"], "mlflow"),
        ("erin", "not_useful", [], "mlflow"),
    ]
    assert {label["query"] for label in labels} == {"disk almost full on a worker node"}


def test_pulling_from_an_experiment_that_does_not_exist_is_one_line_and_exit_2(traced_lookup, capsys):
    overrides, _, _ = traced_lookup
    done = run_main(capsys, "labels", "pull", *overrides, "mlflow.experiment=never-traced")
    assert (
        done.returncode == 2 and done.stderr.count("\n") == 1 and "no MLflow experiment 'never-traced'" in done.stderr
    )


def test_pulling_from_a_store_that_does_not_exist_creates_nothing_and_exits_2(traced_lookup, tmp_path, capsys):
    overrides, _, _ = traced_lookup
    missing = tmp_path / "nothing-here" / "mlflow.db"
    done = run_main(capsys, "labels", "pull", *overrides, f"mlflow.tracking_uri=sqlite:///{missing}")
    assert done.returncode == 2 and f"no MLflow store at {missing}" in done.stderr
    assert not missing.parent.exists()


def test_the_labels_eval_record_writes_are_not_taken_as_reviewers(traced_lookup, mlflow_store, capsys):
    """`knowledge eval --record` labels the lookups it records with the eval set's own answer: not a review."""
    from mlflow.entities import AssessmentSourceType

    from pipelines.labels.mlflow_pull import EVAL_SOURCE_ID

    overrides, invocation_id, trace_id = traced_lookup
    cfg = load_config(overrides)
    before = TraceStore(cfg.trace.db_url, cfg.trace.spool_path).labels(invocation_id)
    mlflow.set_tracking_uri(mlflow_store)
    mlflow.log_expectation(
        trace_id=trace_id,
        name="expected_sources",
        value=["disk/disk-full.md"],
        source=AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=EVAL_SOURCE_ID),
    )
    pulled = run_main(capsys, "labels", "pull", *overrides)
    assert pulled.returncode == 0, pulled.stderr
    assert re.match(r"pulled \d+ assessment\(s\): 0 new label\(s\)\n", pulled.stdout), pulled.stdout
    assert "skipped 1: written by knowledge eval --record (the eval set's own label)" in pulled.stdout
    assert TraceStore(cfg.trace.db_url, cfg.trace.spool_path).labels(invocation_id) == before
