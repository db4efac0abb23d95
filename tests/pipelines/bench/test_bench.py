"""
Smoke tests of `knowledge bench` at a tiny scale: the helpers run end to end and return the
figures they print, with the right keys and positive values. No timing assertions.
"""

import os
import shutil
from pathlib import Path

import pytest

from components.errors import EXIT_BAD_INPUT
from pipelines import bench
from pipelines.bench.corpus import load_bench_config
from pipelines.bench.index_bench import _cleanup_milvus
from pipelines.bench.lookup_queries import MIN_DISTINCT_CASES
from pipelines.cli import main

RUNBOOKS = Path(__file__).resolve().parents[4] / "shared" / "corpus" / "prometheus-runbooks"
# A few runbooks per category that the crafted lookup queries are about.
TINY_CORPUS = {
    "etcd": ["etcdBackendQuotaLowSpace.md", "etcdNoLeader.md", "etcdHighFsyncDurations.md"],
    "node": ["NodeFilesystemSpaceFillingUp.md", "NodeNetworkReceiveErrs.md"],
    "alertmanager": ["AlertmanagerFailedToSendAlerts.md", "AlertmanagerFailedReload.md"],
    "kubernetes": ["KubePodCrashLooping.md", "KubePersistentVolumeFillingUp.md"],
    "prometheus": ["PrometheusRemoteWriteBehind.md", "PrometheusTSDBCompactionsFailing.md"],
}


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory) -> Path:
    if not RUNBOOKS.is_dir():
        pytest.skip(f"runbook corpus not found at {RUNBOOKS}")
    corpus = tmp_path_factory.mktemp("tiny-corpus")
    for category, names in TINY_CORPUS.items():
        (corpus / category).mkdir()
        for name in names:
            shutil.copy(RUNBOOKS / category / name, corpus / category / name)
    return corpus


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def test_vary_markdown_marks_every_section_with_text_outside_fences():
    text = "# Title\n\n## Empty\n## Meaning\nSome text.\n```shell\n# not a heading\n```\n"
    varied = bench.vary_markdown(text, 3)
    line = bench.cluster_line(3)
    assert varied.count(line) == 1  # only "## Meaning" has text of its own
    assert "# Title\n\n## Empty\n## Meaning" in varied  # heading-only sections get no line (no extra chunk)
    assert "# not a heading\n```" in varied  # nothing inserted inside a code fence
    assert bench.cluster_line(3) != bench.cluster_line(4)


def test_percentile_interpolates():
    assert bench.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert bench.percentile([5.0], 0.95) == 5.0


def test_missing_corpus_is_bad_input(tmp_path, capsys):
    status = main(["bench", "index", "--corpus", str(tmp_path / "nope"), "--min-chunks", "10", "mlflow=off"])
    assert status == EXIT_BAD_INPUT
    assert "does not exist" in capsys.readouterr().err


def test_bench_config_is_composed_with_the_bench_state_after_the_user_overrides(tmp_path):
    work = tmp_path / "it's, a dir"  # quotes, commas and spaces stay one override value
    user = ["retrieval.top_k=7", "paths.state_dir=/elsewhere", "milvus.collection=real", "mlflow=sqlite"]
    cfg = load_bench_config(user, work / "state", work / "kb")
    state = work / "state"
    collection = f"bench_{os.getpid()}"
    assert cfg.retrieval.top_k == 7 and cfg.paths.state_dir == str(state) and cfg.kb.path == str(work / "kb")
    assert cfg.milvus.collection == collection and cfg.milvus.uri == f"{state}/milvus.db"
    assert cfg.l0.index_path == f"{state}/{collection}.l0.json"  # interpolations resolve on the bench state
    assert cfg.trace.db_url == f"sqlite:///{state}/traces.db" and cfg.trace.spool_path == f"{state}/trace-spool.jsonl"
    assert cfg.mlflow.tracking_uri is None


def test_bench_config_turns_mlflow_off_even_when_the_user_names_a_store(tmp_path):
    cfg = load_bench_config([f"mlflow.tracking_uri=sqlite:///{tmp_path}/m.db"], tmp_path / "state", tmp_path / "kb")
    assert cfg.mlflow.tracking_uri is None


def test_bench_config_keeps_a_server_uri_on_a_collection_of_its_own(tmp_path):
    cfg = load_bench_config(["milvus=server"], tmp_path / "state", tmp_path / "kb")
    assert cfg.milvus.uri == "http://127.0.0.1:19530" and cfg.milvus.collection == f"bench_{os.getpid()}"


def test_cleanup_drops_the_bench_collection_of_a_lite_db_outside_the_bench_state(tmp_path):
    from components.stores.milvus_collection import connect

    users_db = tmp_path / "user" / "milvus.db"
    cfg = load_bench_config([f"milvus.uri={users_db}"], tmp_path / "state", tmp_path / "kb")
    client = connect(cfg.milvus.uri)
    for name in ("knowledge", cfg.milvus.collection):
        client.create_collection(name, dimension=4)
    _cleanup_milvus(cfg)
    assert client.list_collections() == ["knowledge"]


def test_bench_index_smoke(tiny_corpus):
    printed: list[str] = []
    figures = bench.bench_index(["mlflow=off"], corpus=tiny_corpus, min_chunks=50, rounds=1, echo=printed.append)
    assert figures["chunks"] >= 50
    for key in (
        "pipeline_chunks_per_s",
        "bare_chunks_per_s",
        "ratio",
        "cpu_ratio",
        "peak_rss_mb",
        "pipeline_model_load_s",
        "bare_model_load_s",
        "copies",
        "documents",
    ):
        assert _positive(figures[key]) or (key.endswith("model_load_s") and figures[key] == 0), key
    assert len(figures["bare_encode_s"]) == 2 and all(_positive(s) for s in figures["bare_encode_s"])
    assert len(figures["pipeline_s"]) == 1 and all(_positive(s) for s in figures["pipeline_s"])
    assert figures["vector_max_abs_diff"] < 1e-3  # the bare side encoded the pipeline's own texts
    assert isinstance(figures["meets_target"], bool)
    assert figures["other_cpu_share"] is None or figures["other_cpu_share"] >= 0
    assert "chunks/s" in printed[-1] and "ratio" in printed[-1]


def test_bench_lookup_smoke(tiny_corpus):
    printed: list[str] = []
    figures = bench.bench_lookup(
        ["mlflow=off"], corpus=tiny_corpus, min_chunks=50, queries=3, echo=printed.append, tracing_lookups=2
    )
    assert figures["chunks"] >= 50
    # Crafting goes on until each path has enough distinct queries: both are measured, none repeated.
    assert set(figures["paths"]) == {"filtered", "fallback"}
    assert figures["crafted_queries"]["fallback"] >= MIN_DISTINCT_CASES
    for path, p in figures["paths"].items():
        assert p["queries"] == 3 and p["distinct_queries"] == 3, path
        for side in ("pipeline", "floor", "hybrid_floor", "stock_hybrid"):
            assert _positive(p[side]["p50_ms"]) and _positive(p[side]["p95_ms"]), (path, side)
        assert _positive(p["p50_ratio"]) and _positive(p["hybrid_p50_ratio"]) and _positive(p["stock_hybrid_p50_ratio"])
        assert isinstance(p["meets_hybrid_target"], bool)
        assert isinstance(p["meets_target"], bool)
        assert p["other_cpu_share"] is None or p["other_cpu_share"] >= 0
    assert "p50 ratio" in printed[-1] and "hybrid floor" in printed[-1] and "stock Haystack hybrid" in printed[-1]
    tracing = figures["tracing"]  # MLflow tracing off vs on, in the same run
    assert _positive(tracing["off"]["p50_ms"]) and _positive(tracing["on"]["p50_ms"])
    assert tracing["tracking_uri"].startswith("sqlite:///") and isinstance(tracing["within_limit"], bool)
    assert any("tracing off vs on" in line for line in printed)


def test_bench_lookup_profiles_each_path_stage_by_stage(tiny_corpus):
    printed: list[str] = []
    figures = bench.bench_lookup(
        ["mlflow=off", "retrieval.resident_max_chunks=0", "retrieval.scan_depth=100"],
        corpus=tiny_corpus,
        min_chunks=50,
        queries=2,
        echo=printed.append,
        tracing_lookups=0,
        profile=2,
    )
    profile = figures["profile"]
    assert set(profile) == set(figures["paths"]) and profile
    for path, stages in profile.items():
        assert _positive(stages["lookup (LookupService.lookup)"]) and _positive(stages["retriever"]), path
        assert _positive(stages["query_embedder"]) and "trace_writer" in stages, path
        # Milvus Lite's index is exact: one scan (a dense and a BM25 search) serves every attempt.
        assert stages["retriever: scan (dense + BM25), unfiltered"] > 0, path
        assert stages["searches per lookup (a scan: one per leg)"] == 2, path
        assert not any(stage.startswith("retriever: dense search") for stage in stages), path
    table = next(line for line in printed if line.startswith("| stage (p50 of 2 lookups, ms)"))
    assert "| retriever |" in table and "| searches per lookup (a scan: one per leg) | 2 |" in table


def test_bench_lookup_profiles_the_legs_in_memory_with_no_search(tiny_corpus):
    figures = bench.bench_lookup(
        ["mlflow=off"], corpus=tiny_corpus, min_chunks=50, queries=2, echo=lambda _: None, tracing_lookups=0, profile=2
    )
    assert figures["profile"]
    for path, stages in figures["profile"].items():
        # The collection in memory serves every leg and the check: no search.
        assert stages["retriever: dense leg in memory"] > 0 and "retriever: in memory, checked current" in stages, path
        assert any(stage.startswith("retriever: BM25 leg in memory") for stage in stages), path
        assert not any(stage.startswith(("retriever: dense search", "retriever: outscored check")) for stage in stages)
        assert not any(stage.startswith("retriever: BM25 search") for stage in stages), path
        assert stages["searches per lookup (a scan: one per leg)"] == 0, path


def test_time_lookups_takes_any_service():
    class Echo:
        def lookup(self, query):
            return query

    latencies = bench.time_lookups(Echo(), ["a", "b"])
    assert len(latencies) == 2 and all(latency >= 0 for latency in latencies)


@pytest.mark.milvus_server
def test_bench_on_a_milvus_server_uses_and_drops_a_collection_of_its_own(milvus_server, tiny_corpus):
    from components.stores.milvus_collection import connect

    client = connect(milvus_server.uri)
    if not client.has_collection("knowledge"):
        client.create_collection("knowledge", dimension=4)
    overrides = ["milvus=server", f"milvus.uri={milvus_server.uri}", "milvus.collection=knowledge"]
    figures = bench.bench_index(overrides, corpus=tiny_corpus, min_chunks=10, rounds=1, echo=lambda _: None)
    assert figures["chunks"] >= 10 and figures["vector_max_abs_diff"] < 1e-3
    collections = client.list_collections()
    assert "knowledge" in collections and not [name for name in collections if name.startswith("bench_")]


def test_tracing_bench_config_keeps_the_sample_rate_and_a_tracking_server(tmp_path):
    from pipelines.bench.tracing import small_kb_config

    served = small_kb_config(["mlflow.tracking_uri=http://127.0.0.1:5999", "mlflow.sample_rate=0.1"], tmp_path, "kb")
    assert served.mlflow.tracking_uri == "http://127.0.0.1:5999" and served.mlflow.sample_rate == 0.1
    assert served.paths.state_dir == str(tmp_path / "state") and served.kb.path == str(Path("kb").resolve())
    local = small_kb_config([f"mlflow.tracking_uri=sqlite:///{tmp_path}/user.db"], tmp_path, "kb")
    assert local.mlflow.tracking_uri is None  # the bench points MLflow on at its own store


@pytest.mark.slow
def test_bench_backends_smoke():
    from pipelines.bench.backends import bench_backends

    printed: list[str] = []
    report = bench_backends(
        ["mlflow=off"], ["torch", "onnx"], rounds=1, skip=("cold_start", "serve"), echo=printed.append
    )
    assert report["vectors"]["onnx"]["below_target"] == 0 and report["vectors"]["onnx"]["min_cosine"] >= 0.9999
    assert report["vectors"]["queries"] > 100  # every eval set
    for backend in ("torch", "onnx"):
        assert _positive(report["embed"][backend]["p50_1_text_ms"]) and _positive(
            report["embed"][backend]["p50_2_text_ms"]
        )
        assert _positive(report["index"][backend]["chunks_per_s"])
    assert any("x torch" in line for line in printed)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backends", "torch,tf"], "choose among torch, onnx, onnx_int8"),
        (["--skip", "everything"], "parts are vectors, embed, index, cold_start, serve"),
        (["--rounds", "0"], "must be 1 or more"),
    ],
)
def test_bench_backends_bad_options_are_one_line(capsys, args, message):
    from pipelines.cli import main

    assert main(["bench", "backends", *args, "mlflow=off"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
