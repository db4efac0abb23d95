"""
MLflow: one trace per lookup, read back from a real sqlite tracking store, with one span per
pipeline component in the spec's order, the tags, and retrieval_details attached. An unreachable
server warns once and changes nothing else; tracking_uri=null turns MLflow off.
"""

import logging
import time

import mlflow
import pytest

from components.tracing.mlflow_sink import flush_all, get_sink
from pipelines.config.settings import load_config
from pipelines.lookup import LookupService
from tests.conftest import sample_overrides, state_overrides

EXPERIMENT = "lookup-knowledge-tests"
COMPONENTS = [
    "query_transformer",
    "l0_hints",
    "query_embedder",
    "retriever",
    "reranker",
    "competition",
    "deduper",
    "context_packer",
    "assembler",
    "trace_writer",
]


@pytest.fixture(scope="module")
def traced(sample_cfg, mlflow_store, tmp_path_factory):
    """traced(*overrides) -> a LookupService with MLflow on (the session store), its own trace database."""
    state = tmp_path_factory.mktemp("mlflow-traced")
    services: dict[tuple[str, ...], LookupService] = {}

    def make(*overrides: str) -> LookupService:
        if overrides not in services:
            cfg = load_config(
                state_overrides(
                    state,
                    *sample_overrides(
                        sample_cfg,
                        f"trace.db_url=sqlite:///{state}/traces.db",
                        f"mlflow.tracking_uri='{mlflow_store}'",
                        f"mlflow.experiment={EXPERIMENT}",
                        f"mlflow.artifact_location={state}/artifacts",
                        "mlflow.sample_rate=1.0",  # every lookup traced (the default samples)
                        *overrides,
                    ),
                )
            )
            services[overrides] = LookupService(cfg)
        return services[overrides]

    return make


def traces_of(mlflow_store: str, filter_string: str | None = None):
    """Every trace of the test experiment, once MLflow has written what it was given."""
    assert flush_all(timeout=180)
    client = mlflow.MlflowClient(mlflow_store)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    return experiment, list(
        client.search_traces(locations=[experiment.experiment_id], filter_string=filter_string, max_results=1000)
    )


def read_trace(mlflow_store: str, invocation_id: str):
    experiment, traces = traces_of(mlflow_store, f"tags.invocation_id = '{invocation_id}'")
    assert len(traces) == 1, f"one trace per lookup, found {len(traces)}"
    return experiment, traces[0]


def test_a_lookup_is_one_trace_with_a_span_per_component_in_spec_order(traced, mlflow_store, tmp_path_factory):
    service = traced()
    result = service.lookup("inode exhaustion df -i")
    experiment, trace = read_trace(mlflow_store, result.invocation_id)

    assert trace.info.tags["invocation_id"] == result.invocation_id
    assert trace.info.tags["found"] == "true"
    assert trace.info.tags["retrieval_layer"] == "L0+L1"
    assert trace.info.tags["fallback_reason"] == "none"
    assert trace.info.tags["status"] == "ok"

    spans = trace.data.spans
    root = next(s for s in spans if s.parent_id is None)
    assert root.name == "lookup_knowledge"
    children = sorted((s for s in spans if s.parent_id == root.span_id), key=lambda s: s.start_time_ns)
    assert sorted(s.name for s in children) == sorted(COMPONENTS), "one span per pipeline component"
    span = {s.name: s for s in children}

    # The spec's order: transform before retrieval, retrieval before post-processing, evidence
    # blocks before context packing, trace recording after result assembly.
    assert span["query_transformer"].end_time_ns <= span["retriever"].start_time_ns
    assert span["query_embedder"].end_time_ns <= span["retriever"].start_time_ns
    assert span["retriever"].end_time_ns <= span["reranker"].start_time_ns
    assert span["reranker"].end_time_ns <= span["deduper"].start_time_ns
    assert span["deduper"].end_time_ns <= span["context_packer"].start_time_ns
    assert span["context_packer"].end_time_ns <= span["assembler"].start_time_ns
    assert span["assembler"].end_time_ns <= span["trace_writer"].start_time_ns
    assert children[-1].name == "trace_writer"
    assert root.start_time_ns <= children[0].start_time_ns and children[-1].end_time_ns <= root.end_time_ns

    # Inputs and outputs of each stage, brief: scalars, previews, counts, shapes.
    assert span["query_transformer"].inputs == {"query": "inode exhaustion df -i"}
    assert span["query_transformer"].outputs["query"] == "inode exhaustion df -i"
    assert "384" in str(span["query_embedder"].outputs["query_embedding"])
    assert span["retriever"].attributes["selected_attempt"] == 0
    assert span["deduper"].outputs["evidence_blocks"] >= len(result.evidence_blocks) > 0
    assert span["assembler"].outputs["result"]["found"] is True
    assert span["assembler"].outputs["result"]["evidenceSources"] == [b.source for b in result.evidence_blocks]
    assert span["trace_writer"].outputs == {"invocation_id": result.invocation_id, "trace_status": "recorded"}
    for child in children:
        assert child.inputs is not None and child.outputs is not None, child.name

    # The recorded retrieval_details on the root, as the row holds them (not a type name).
    row = service.trace_writer.store.get(result.invocation_id)
    assert root.attributes["retrieval_details"] == row["retrieval_details"]
    assert root.outputs["invocationId"] == result.invocation_id
    assert root.inputs["query"] == "inode exhaustion df -i"
    # The experiment's artifacts live under the state folder, not the working directory.
    assert "artifacts" in experiment.artifact_location and "mlflow-traced" in experiment.artifact_location


def test_fallback_reason_and_found_are_trace_tags(traced, mlflow_store):
    result = traced("retrieval.reference_threshold=0.95").lookup("pg replica lag")
    _, trace = read_trace(mlflow_store, result.invocation_id)
    assert trace.info.tags["fallback_reason"] == "filtered_vector_low_quality"
    no_evidence = traced().lookup("how to bake sourdough bread")
    _, trace = read_trace(mlflow_store, no_evidence.invocation_id)
    assert trace.info.tags["found"] == "false" and trace.info.tags["retrieval_layer"] == "L1"


def test_a_failed_lookup_is_an_error_trace(traced, mlflow_store, monkeypatch):
    service = traced()
    service.warm_up()

    def broken(**_kwargs):
        raise RuntimeError("context packer out of paper")

    monkeypatch.setattr(service.pipeline.get_component("context_packer"), "run", broken)
    result = service.lookup("certificate expiry")
    assert result.evidence_status == "error"
    _, trace = read_trace(mlflow_store, result.invocation_id)
    assert trace.info.tags["status"] == "error"
    assert str(trace.info.state).endswith("ERROR")
    failed = next(s for s in trace.data.spans if s.name == "context_packer")
    assert "out of paper" in failed.status.description
    row = service.trace_writer.store.get(result.invocation_id)
    assert row["retrieval_details"]["completed_stages"][:2] == ["query_transformer", "l0_hints"]
    assert "context_packer" not in row["retrieval_details"]["completed_stages"]


def test_unreachable_tracking_server_warns_once_and_changes_nothing(sample_cfg, tmp_path, caplog):
    uri = "http://127.0.0.1:9"
    cfg = load_config(
        state_overrides(
            tmp_path / "state",
            *sample_overrides(
                sample_cfg, f"trace.db_url=sqlite:///{tmp_path}/traces.db", f"mlflow.tracking_uri='{uri}'"
            ),
        )
    )
    service = LookupService(cfg)
    with caplog.at_level(logging.WARNING):
        service.warm_up()
        started = time.perf_counter()
        results = [service.lookup(q) for q in ("certificate expiry", "pg replica lag", "disk full on /var")]
        elapsed = time.perf_counter() - started
        sink = get_sink(uri, cfg.mlflow.experiment)
        sink.flush(timeout=30)
        results += [service.lookup("certificate expiry") for _ in range(3)]
        sink.flush(timeout=30)
    assert sink.state == "disabled"
    assert all(r.found and r.trace_status == "recorded" for r in results)
    warnings = [r.getMessage() for r in caplog.records if "MLflow tracing disabled" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "127.0.0.1:9" in warnings[0]
    assert elapsed < 30  # no retry loop against the dead server on the lookup path
    assert service.trace_writer.store.count() == 6


def test_tracking_uri_null_turns_mlflow_off(sample_cfg, tmp_path, mlflow_store, traced):
    traced().lookup("certificate expiry")  # the session store has traces: none must be added below
    before = len(traces_of(mlflow_store)[1])

    cfg = load_config(
        state_overrides(
            tmp_path / "state",
            *sample_overrides(
                sample_cfg,
                f"trace.db_url=sqlite:///{tmp_path}/traces.db",
                "mlflow.tracking_uri=null",
                f"mlflow.experiment={EXPERIMENT}",
            ),
        )
    )
    service = LookupService(cfg)
    result = service.lookup("certificate expiry")
    assert service.trace_writer.tracking_uri is None and service.trace_writer._sink is None
    assert result.found and result.trace_status == "recorded"
    assert len(traces_of(mlflow_store)[1]) == before


def test_tracing_overhead_comparison_runs_both_modes(sample_cfg, tmp_path, mlflow_store):
    from pipelines.bench.tracing import compare_tracing_overhead

    cfg = load_config(
        state_overrides(
            tmp_path / "state",
            *sample_overrides(
                sample_cfg,
                f"trace.db_url=sqlite:///{tmp_path}/traces.db",
                f"mlflow.tracking_uri='{mlflow_store}'",
                f"mlflow.experiment={EXPERIMENT}",
            ),
        )
    )
    lines: list[str] = []
    report = compare_tracing_overhead(
        cfg, queries=("certificate expiry", "pg replica lag"), threads=2, seconds=0.3, rounds=2, latency_lookups=2,
        out=lines.append,
    )  # fmt: skip
    for mode in ("off", "on"):
        assert (
            report[mode]["p50_ms"] > 0 and report[mode]["lookups_per_s"] > 0 and report[mode]["cpu_ms_per_lookup"] > 0
        )
    assert report["flushed"] and "throughput_cost" in report
    assert report["trace_cpu_ms"]["build_ms"] > 0 and report["trace_cpu_ms"]["write_ms"] > 0
    assert len(lines) == 6 and "saturated" in lines[1] and "of saturated throughput" in lines[3]
    assert "one trace" in lines[4] and "other processes" in lines[5]


def test_sample_rate_zero_traces_failed_calls_only(traced, mlflow_store, monkeypatch):
    service = traced("mlflow.sample_rate=0")
    service.warm_up()
    ok = service.lookup("certificate expiry")
    _, traces = traces_of(mlflow_store, f"tags.invocation_id = '{ok.invocation_id}'")
    assert traces == [] and service.trace_writer.store.get(ok.invocation_id) is not None

    def broken(**_kwargs):
        raise RuntimeError("reranker on strike")

    monkeypatch.setattr(service.pipeline.get_component("reranker"), "run", broken)
    failed = service.lookup("pg replica lag")
    _, trace = read_trace(mlflow_store, failed.invocation_id)
    assert trace.info.tags["status"] == "error"


def test_concurrent_lookups_each_get_their_own_trace(traced, mlflow_store):
    from concurrent.futures import ThreadPoolExecutor

    service = traced()
    service.warm_up()
    queries = ["certificate expiry", "pg replica lag", "disk full on /var", "how to bake sourdough bread"]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(service.lookup, queries * 2))
    for query, result in zip(queries * 2, results, strict=False):
        _, trace = read_trace(mlflow_store, result.invocation_id)
        spans = {s.name: s for s in trace.data.spans}
        assert spans["lookup_knowledge"].inputs["query"] == query
        assert spans["query_transformer"].inputs == {"query": query}
        assert spans["trace_writer"].outputs["invocation_id"] == result.invocation_id
        attempts = [s for s in trace.data.spans if s.name.startswith("attempt ")]
        assert len(trace.data.spans) == 1 + len(COMPONENTS) + len(attempts) and attempts


def test_a_one_shot_cli_lookup_writes_its_trace_and_leaves_no_file_outside_the_state_folder(tmp_path, served_index):
    """MLflow on, one `knowledge lookup` in its own process: the trace is in the store at exit, and
    nothing was written to /dev/shm or the temp folder."""
    import json
    import os
    import shutil

    from tests.conftest import SAMPLE_KB
    from tests.helpers import run_cli

    state, temp = tmp_path / "state", tmp_path / "tmp"
    temp.mkdir()
    shutil.copytree(served_index, state)  # knowledge/ indexed (indexing writes nothing to MLflow)
    overrides = [
        f"paths.state_dir={state}",
        f"kb.path={SAMPLE_KB}",
        "mlflow=sqlite",
        f"mlflow.experiment={EXPERIMENT}",
        "mlflow.sample_rate=1.0",
    ]
    cfg = load_config(overrides)

    def shm() -> set[str]:
        return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()

    shm_before = shm()
    done = run_cli("lookup", "certificate expiry", *overrides, cwd=tmp_path, TMPDIR=str(temp))
    assert done.returncode == 0, done.stderr
    invocation_id = json.loads(done.stdout)["invocationId"]

    assert [name for name in shm() - shm_before if "knowledge" in name or "mlflow" in name] == []
    assert list(temp.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state", "tmp"]  # nothing in the working folder
    client = mlflow.MlflowClient(cfg.mlflow.tracking_uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    traces = client.search_traces(
        locations=[experiment.experiment_id], filter_string=f"tags.invocation_id = '{invocation_id}'"
    )
    assert len(traces) == 1 and traces[0].info.tags["found"] == "true"


def test_a_fallback_lookup_explains_each_decision_in_its_trace(traced, mlflow_store):
    """A filtered attempt retried unfiltered: the trace read back shows why, span by span."""
    import json

    from mlflow.entities import Document, SpanType

    service = traced("retrieval.reference_threshold=0.95")
    result = service.lookup("pg replica lag")
    assert result.retrieval_trace.fallback_reason == "filtered_vector_low_quality"
    _, found = read_trace(mlflow_store, result.invocation_id)
    mlflow.flush_trace_async_logging()
    trace = mlflow.get_trace(found.info.trace_id)
    spans = {s.name: s for s in trace.data.spans}

    root = spans["lookup_knowledge"]
    assert root.outputs == json.loads(json.dumps(result.to_dict())), "the root's outputs are the lookup JSON"

    retriever = spans["retriever"]
    assert retriever.span_type == SpanType.RETRIEVER
    documents = [Document(**d) for d in retriever.outputs]
    blocks = {b.evidence_key: b for b in result.evidence_blocks}
    assert documents and {b for b in blocks} <= {d.id for d in documents}
    for document in documents:
        assert document.metadata["doc_uri"] == document.metadata["source"]
        assert document.metadata["chunk_id"] == document.id and 0.0 <= document.metadata["score"] <= 1.0
        if document.metadata["in_context_pack"]:
            assert document.page_content == blocks[document.id].content
    assert retriever.attributes["fallback_reason"] == "filtered_vector_low_quality"
    assert [e.name for e in retriever.events] == ["fallback"]
    assert retriever.events[0].attributes["reason"] == "filtered_vector_low_quality"

    attempts = sorted((s for s in trace.data.spans if s.parent_id == retriever.span_id), key=lambda s: s.start_time_ns)
    assert [s.span_type for s in attempts] == [SpanType.RETRIEVER] * 2
    filtered, retry = (a.attributes for a in attempts)
    category = result.l0_hints.domains[0]
    assert filtered["category_filter"] == category and category in filtered["filter_expression"]
    assert filtered["outcome"] == "retried: filtered_vector_low_quality"
    assert filtered["fallback_reason"] == "filtered_vector_low_quality"
    assert filtered["top_similarity"] < filtered["reference_threshold"] == 0.95
    assert "category_filter" not in retry and retry["outcome"] == "selected" and "fallback_reason" not in retry
    for attempt, record in zip((filtered, retry), result.retrieval_trace.attempts, strict=True):
        assert attempt["legs_run"] == record.legs and "dense" in attempt["legs_run"]
        assert ("bm25" in attempt["legs_run"]) == ("top_bm25" in attempt) == ("bm25_skipped" not in attempt)
        assert attempt["usable_count"] == record.usable_count and attempt["candidate_count"] == record.candidate_count
        best = attempt["top_dense"][0]
        assert best["similarity"] == round(record.top_similarity, 4) and "raw_score" not in best
        assert len(best) == 4  # rank, chunk id, similarity, and the leg's own score under its label
    for span in attempts:
        assert [Document(**d).metadata["leg"] for d in span.outputs]
        assert retriever.start_time_ns <= span.start_time_ns <= span.end_time_ns <= retriever.end_time_ns

    hints = spans["l0_hints"]
    assert hints.span_type != SpanType.RETRIEVER  # only the retriever's documents are retrieval context
    assert hints.attributes["domains"] == result.l0_hints.domains
    assert hints.attributes["filter_category"] == category
    assert hints.attributes["uncovered_terms"] == result.l0_hints.uncovered_terms
    assert spans["query_transformer"].attributes["variants"] == result.query_transform.variants
    top = spans["reranker"].outputs["top"]
    assert top[0]["final_score"] == round(result.rerank_trace[0].final_score, 4)
    assert top[0]["boosts"] == {k: round(v, 4) for k, v in result.rerank_trace[0].boosts.items() if v}
    assert spans["deduper"].attributes["final_count"] == result.dedup.final_count
    packer = spans["context_packer"].attributes
    assert packer["budget_tokens"] == result.context_pack.budget_tokens and packer["kept"] == len(
        result.context_pack.blocks
    )


def test_drain_waits_for_the_traces_and_leaves_mlflows_writer_running(traced, mlflow_store):
    from mlflow.tracing.provider import _get_trace_exporter

    from components.tracing.mlflow_sink import _export_queues, drain

    service = traced()
    results = [service.lookup(q) for q in ("certificate expiry", "pg replica lag")]
    assert drain(timeout=180)
    client = mlflow.MlflowClient(mlflow_store)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    for result in results:
        found = client.search_traces(
            locations=[experiment.experiment_id], filter_string=f"tags.invocation_id = '{result.invocation_id}'"
        )
        assert len(found) == 1
    assert _export_queues() and all(queue.is_active() for queue in _export_queues())
    assert _get_trace_exporter() is not None


def test_a_model_adapt_did_not_recommend_tags_every_trace(mlflow_store, small_kb, tmp_path):
    import json

    from pipelines.indexing import run_indexing
    from tests.helpers import shifted_model

    model = shifted_model(tmp_path / "model")
    calibration = json.loads((model / "calibration.json").read_text(encoding="utf-8"))
    verdict = {"recommended": False, "reason": "not better at level 0.05"}
    (model / "calibration.json").write_text(json.dumps({**calibration, "verdict": verdict}), encoding="utf-8")
    state = tmp_path / "state"
    cfg = load_config(
        state_overrides(
            state,
            f"kb.path={small_kb}",
            f"embedder.model={model}",
            f"mlflow.tracking_uri='{mlflow_store}'",
            f"mlflow.experiment={EXPERIMENT}",
            f"mlflow.artifact_location={state}/artifacts",
            "mlflow.sample_rate=1.0",
        )
    )
    run_indexing(cfg)
    result = LookupService(cfg).lookup("disk almost full")
    _, trace = read_trace(mlflow_store, result.invocation_id)
    assert trace.info.tags["model_verdict"] == "not recommended: not better at level 0.05"
