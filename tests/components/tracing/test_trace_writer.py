"""TraceWriter as a Haystack component: serialization, place in the pipeline, warm-up, compaction."""

import hashlib
import json
import re
import time

import pytest
from haystack import Pipeline

from components.tracing import stage_recorder
from components.tracing.trace_writer import ARGUMENT_QUERY_CHARS, RAW_QUERY_CHARS, TraceWriter, bounded_arguments
from pipelines.lookup import ALLOWED_MODULES, build_lookup_pipeline
from tests.components.refusals import assert_refused


def test_trace_writer_serializes_with_plain_init_parameters(tmp_path):
    writer = TraceWriter(
        db_url=f"sqlite:///{tmp_path}/t.db",
        spool_path=str(tmp_path / "s.jsonl"),
        summary_chars=50,
        tracking_uri="sqlite:///x.db",
        experiment="e",
        artifact_location="/tmp/a",
        retry_interval=1.5,
        timeout_s=2.5,
        sample_rate=0.25,
        model_verdict="not recommended: no gain",
    )
    data = writer.to_dict()
    assert data["type"] == "components.tracing.trace_writer.TraceWriter"
    assert data["init_parameters"] == {
        "db_url": f"sqlite:///{tmp_path}/t.db",
        "spool_path": str(tmp_path / "s.jsonl"),
        "summary_chars": 50,
        "tool_name": "lookup_knowledge",
        "tracking_uri": "sqlite:///x.db",
        "experiment": "e",
        "artifact_location": "/tmp/a",
        "retry_interval": 1.5,
        "timeout_s": 2.5,
        "sample_rate": 0.25,
        "model_verdict": "not recommended: no gain",
    }
    assert TraceWriter.from_dict(data).to_dict() == data


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"sample_rate": 1.5}, "sample_rate=1.5 must lie in [0, 1]"),
        ({"sample_rate": -0.1}, "sample_rate=-0.1 must lie in [0, 1]"),
        ({"summary_chars": -1}, "summary_chars=-1 must be at least 0"),
        ({"retry_interval": -5.0}, "retry_interval=-5.0 must be at least 0"),
        ({"timeout_s": -1.0}, "timeout_s=-1.0 must be at least 0"),
    ],
)
def test_init_refuses_values_out_of_range_by_name(tmp_path, params, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TraceWriter(
            db_url=f"sqlite:///{tmp_path}/t.db",
            spool_path=str(tmp_path / "s.jsonl"),
            tracking_uri=None,
            artifact_location=None,
            **params,
        )


def test_trace_writer_is_the_last_step_fed_by_the_assembler(make_config):
    cfg = make_config()
    pipeline = build_lookup_pipeline(cfg)
    assert set(pipeline.graph.successors("assembler")) == {"trace_writer"}
    assert list(pipeline.graph.successors("trace_writer")) == []
    edge = pipeline.graph.get_edge_data("assembler", "trace_writer")
    assert any(e["from_socket"].name == "result" and e["to_socket"].name == "result" for e in edge.values())
    writer = pipeline.get_component("trace_writer")
    assert writer.db_url == cfg.trace.db_url and writer.tracking_uri is None
    # The serialized pipeline keeps it, with its plain parameters.
    restored = Pipeline.loads(pipeline.dumps(), allowed_modules=ALLOWED_MODULES)
    assert restored.get_component("trace_writer").to_dict() == writer.to_dict()


def test_warm_up_is_idempotent_and_tolerates_a_database_that_is_down(tmp_path):
    (tmp_path / "blocked").write_text("")
    writer = TraceWriter(
        db_url=f"sqlite:///{tmp_path}/blocked/t.db",
        spool_path=str(tmp_path / "s.jsonl"),
        tracking_uri=None,
        artifact_location=None,
    )
    writer.warm_up()
    writer.warm_up()
    ok = TraceWriter(
        db_url=f"sqlite:///{tmp_path}/t.db",
        spool_path=str(tmp_path / "s2.jsonl"),
        tracking_uri=None,
        artifact_location=None,
    )
    ok.warm_up()
    assert ok.store._schema_ready
    ok.warm_up()


def test_a_long_query_is_stored_as_the_pipeline_used_it_with_its_length_and_hash(sample_service, tmp_path):
    query = "disk full " * 400
    result = sample_service.lookup(query)
    writer = TraceWriter(
        db_url=f"sqlite:///{tmp_path}/t.db",
        spool_path=str(tmp_path / "s.jsonl"),
        tracking_uri=None,
        artifact_location=None,
    )
    out = writer.run(result=result, arguments={"query": query}, started_at=time.time())["result"]
    row = writer.store.get(out.invocation_id)
    transform = row["retrieval_details"]["query_transform"]
    assert len(transform["raw"]) == RAW_QUERY_CHARS and transform["raw_truncated"] is True
    assert row["arguments"] == {
        "query": result.query_transform.normalized,
        "query_chars": len(query),
        "query_sha256": hashlib.sha256(query.encode()).hexdigest(),
    }
    assert len(json.dumps(row["retrieval_details"]).encode()) < 16 * 1024
    assert out is not result and out.invocation_id and result.invocation_id != out.invocation_id


def test_a_record_that_cannot_be_built_never_costs_the_lookup(sample_service, tmp_path, monkeypatch):
    result = sample_service.lookup("certificate expiry")
    writer = TraceWriter(
        db_url=f"sqlite:///{tmp_path}/t.db",
        spool_path=str(tmp_path / "s.jsonl"),
        tracking_uri=None,
        artifact_location=None,
    )

    def broken(_result):
        raise TypeError("unexpected shape")

    monkeypatch.setattr(writer, "details", broken)
    out = writer.run(result=result, arguments={"query": "certificate expiry"}, started_at=time.time())["result"]
    assert out.trace_status == "lost" and out.found and out.evidence_blocks == result.evidence_blocks


def test_a_megabyte_query_is_stored_within_the_bound(sample_service, tmp_path):
    query = "x" * 1_000_000
    stage_recorder.clear_last_recording()
    writer = TraceWriter(
        db_url=f"sqlite:///{tmp_path}/t.db",
        spool_path=str(tmp_path / "s.jsonl"),
        tracking_uri=None,
        artifact_location=None,
    )
    error = writer.record_error(query, RuntimeError("boom"), time.time(), component_name="retriever")
    row = writer.store.get(error.invocation_id)
    assert len(row["arguments"]["query"]) == ARGUMENT_QUERY_CHARS
    assert row["arguments"]["query_chars"] == 1_000_000
    assert row["arguments"]["query_sha256"] == hashlib.sha256(query.encode()).hexdigest()
    assert bounded_arguments({"query": "short"}) == {"query": "short"}


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("db_url", "notaurl", "not a database URL"),
    ("db_url", "mysql://u@h/db", "not a database URL"),
    ("spool_path", "", "non-empty"),
    ("tracking_uri", "", "non-empty"),
    ("artifact_location", "", "non-empty"),
    ("summary_chars", -1, "at least 0"),
    ("tool_name", "", "non-empty"),
    ("experiment", "", "non-empty"),
    ("retry_interval", -5.0, "at least 0"),
    ("timeout_s", -1.0, "at least 0"),
    ("sample_rate", 1.5, "[0, 1]"),
    ("model_verdict", "", "non-empty"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(
        lambda **changed: TraceWriter(
            **{
                **{
                    "db_url": "sqlite:///traces.db",
                    "spool_path": "spool.jsonl",
                    "tracking_uri": None,
                    "artifact_location": None,
                },
                **changed,
            }
        ),
        parameter,
        value,
        rule,
    )
