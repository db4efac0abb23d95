"""`knowledge bench lookup`: `LookupService.lookup` against two floors measured in the same run: one
query embedding plus one raw Milvus search (the dense floor), and one embedding plus one dense and
one BM25 search with the same filter (the hybrid floor, the least any hybrid retriever pays on
Milvus); beside them the stock Haystack hybrid as a peer; see docs/benchmarks.md."""

import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from components.common.stats import percentile
from pipelines.bench.corpus import build_repeated_kb, load_bench_config, read_corpus, resolve_corpus
from pipelines.bench.index_bench import _cleanup_milvus
from pipelines.bench.lookup_queries import (
    MEASURED_PATHS,
    MIN_DISTINCT_CASES,
    LookupCase,
    craft_cases,
    lookup_query_candidates,
    not_measured_line,
    pick_cases,
    too_few_cases,
)
from pipelines.bench.machine import (
    OtherCpu,
    call_ms,
    format_other_cpu,
    latency_summary,
    load_average,
    peak_rss_mb,
    settle,
    timed,
)
from pipelines.config.settings import knowledge_store

LOOKUP_RATIO_TARGETS = {"filtered": 1.3, "fallback": 2.2}
HYBRID_RATIO_TARGETS = {"filtered": 1.15, "fallback": 1.3}


WARMUP_LOOKUPS = 3


def time_lookups(service, queries: Iterable[str]) -> list[float]:
    """
    Wall-clock milliseconds of `service.lookup(query)` for each query, in order. Any object with
    a `lookup(query)` method will do, e.g. two services built from two configs.
    """
    return [call_ms(lambda q=query: service.lookup(q))[0] for query in queries]


class LookupFloor:
    """
    The least work a lookup has to do: one query embedding through the pipeline's own
    `KnowledgeQueryEmbedder.run` and one raw `MilvusClient.search` with the pipeline's top_k,
    output fields, search parameters and (when given) category filter expression.
    """

    def __init__(self, cfg: DictConfig, query_embedder) -> None:
        self.cfg = cfg
        self.embedder = query_embedder
        self.client = knowledge_store(cfg).connect()

    def run(self, query: str, filter_expression: str | None):
        from components.stores.milvus_collection import CATEGORY_FIELD, CONTENT_FIELD, METADATA_FIELD, VECTOR_FIELD
        from components.stores.vector_search import as_float_list

        embedding = self.embedder.run(query=query)["query_embedding"]
        return self.client.search(
            self.cfg.milvus.collection,
            data=[as_float_list(embedding)],
            limit=self.cfg.retrieval.top_k,
            filter=filter_expression or "",
            output_fields=[CONTENT_FIELD, METADATA_FIELD, CATEGORY_FIELD],
            search_params={"metric_type": "L2", "params": dict(self.cfg.milvus.search_params)},
            anns_field=VECTOR_FIELD,
        )[0]

    def run_case(self, case: LookupCase):
        return self.run(case.query, case.filter_expression)

    def time(self, cases: Iterable[LookupCase]) -> list[float]:
        """Wall-clock milliseconds of the floor for each case, in order."""
        return [call_ms(lambda c=case: self.run_case(c))[0] for case in cases]


class HybridFloor(LookupFloor):
    """
    The least work of a hybrid lookup: the dense floor, then one raw BM25 search of the query text
    on the collection's `sparse` field with the same filter, `retrieval.bm25_top_k` hits and the same
    output fields (what the pipeline's BM25 leg asks for, less the stored vectors it scores locally).
    """

    def run(self, query: str, filter_expression: str | None):
        from components.stores.milvus_collection import CATEGORY_FIELD, CONTENT_FIELD, METADATA_FIELD, SPARSE_FIELD

        dense = super().run(query, filter_expression)
        sparse = self.client.search(
            self.cfg.milvus.collection,
            data=[query],
            limit=self.cfg.retrieval.bm25_top_k or self.cfg.retrieval.top_k,
            filter=filter_expression or "",
            output_fields=[CONTENT_FIELD, METADATA_FIELD, CATEGORY_FIELD],
            search_params={"metric_type": "BM25"},
            anns_field=SPARSE_FIELD,
        )[0]
        return dense, sparse


class StockHybrid:
    """
    The stock Haystack hybrid, a peer rather than a floor: the pipeline's query embedding, then a
    Haystack `Pipeline` of milvus-haystack's `MilvusEmbeddingRetriever` (top_k) and
    `MilvusSparseEmbeddingRetriever` (Milvus' built-in BM25 function, `bm25_top_k`) on the same
    collection with the same category filter, joined by `DocumentJoiner` (reciprocal rank fusion, top_k).
    """

    def __init__(self, cfg: DictConfig, query_embedder) -> None:
        from haystack import Pipeline
        from haystack.components.joiners import DocumentJoiner

        dense, sparse = knowledge_store(cfg).vector_search("haystack").retrievers()
        self.top_k = {"dense": cfg.retrieval.top_k, "bm25": cfg.retrieval.bm25_top_k or cfg.retrieval.top_k}
        self.embedder = query_embedder
        self.pipeline = Pipeline()
        self.pipeline.add_component("dense", dense)
        self.pipeline.add_component("bm25", sparse)
        self.pipeline.add_component(
            "joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=cfg.retrieval.top_k)
        )
        self.pipeline.connect("dense.documents", "joiner.documents")
        self.pipeline.connect("bm25.documents", "joiner.documents")

    def run(self, query: str, category: str | None):
        from components.stores.milvus_collection import CATEGORY_FIELD

        embedding = self.embedder.run(query=query)["query_embedding"]
        filters = None if category is None else {"field": CATEGORY_FIELD, "operator": "==", "value": category}
        inputs = {"dense": {"query_embedding": list(embedding)}, "bm25": {"query_text": query}}
        for name, arguments in inputs.items():
            arguments.update(filters=filters, top_k=self.top_k[name])
        return self.pipeline.run(inputs)["joiner"]["documents"]

    def run_case(self, case: LookupCase):
        return self.run(case.query, case.category)


def measure_path(
    service, floors: dict[str, Any], cases: Sequence[LookupCase], warmups: int = WARMUP_LOOKUPS
) -> dict[str, Any]:
    """
    Pipeline and floor latencies of one path (`floors` by name: "floor", the dense one,
    "hybrid_floor", and the peer "stock_hybrid": anything with `run_case`). Each case is timed on every side back to back, the order rotating, so
    background load (other work on the machine) weighs on all alike. Process CPU time is recorded
    beside wall time: it is far less sensitive to other processes.
    """
    for case in cases[:warmups]:
        service.lookup(case.query)
        for floor in floors.values():
            floor.run_case(case)
    sides: dict[str, list[tuple[float, float]]] = {"pipeline": [], **{name: [] for name in floors}}
    for number, case in enumerate(cases):
        calls = [("pipeline", lambda c=case: service.lookup(c.query))]
        calls += [(name, lambda c=case, f=floor: f.run_case(c)) for name, floor in floors.items()]
        shift = number % len(calls)
        for side, function in calls[shift:] + calls[:shift]:
            sides[side].append(call_ms(function))
    summaries = {}
    for side, samples in sides.items():
        summaries[side] = latency_summary([wall for wall, _ in samples])
        summaries[side]["cpu_p50_ms"] = round(percentile([cpu for _, cpu in samples], 0.5), 2)

    def p50_ratio(floor: str, column: int) -> float:  # column 0: wall, 1: CPU
        return percentile([s[column] for s in sides["pipeline"]], 0.5) / percentile(
            [s[column] for s in sides[floor]], 0.5
        )

    figures = {
        "queries": len(cases),
        "distinct_queries": len({c.query for c in cases}),
        **summaries,
        "p50_ratio": p50_ratio("floor", 0),  # unrounded: the target verdict is taken on it
        "cpu_p50_ratio": round(p50_ratio("floor", 1), 3),
    }
    if "hybrid_floor" in floors:
        figures["hybrid_p50_ratio"] = p50_ratio("hybrid_floor", 0)
        figures["hybrid_cpu_p50_ratio"] = round(p50_ratio("hybrid_floor", 1), 3)
    if "stock_hybrid" in floors:
        figures["stock_hybrid_p50_ratio"] = round(p50_ratio("stock_hybrid", 0), 3)
    return figures


def measure_paths(
    service, floors: dict[str, Any], cases: Sequence[LookupCase], queries: int, echo: Callable[[str], None]
) -> dict[str, Any]:
    """
    `measure_path` for each path with enough distinct crafted queries, `queries` timed each, with
    the target verdicts; a path with too few gets `too_few_cases` figures only (and is said so).
    """
    paths: dict[str, Any] = {}
    for path in MEASURED_PATHS:
        too_few = too_few_cases(cases, path)
        if too_few is not None:
            paths[path] = too_few
            echo(f"{path}: {not_measured_line(path, too_few)}")
            continue
        with OtherCpu() as other:
            figures_of_path = paths[path] = measure_path(service, floors, pick_cases(cases, path, queries))
        figures_of_path["other_cpu_share"] = other.share
        figures_of_path["target_p50_ratio"] = LOOKUP_RATIO_TARGETS[path]
        figures_of_path["meets_target"] = figures_of_path["p50_ratio"] <= LOOKUP_RATIO_TARGETS[path]
        figures_of_path["p50_ratio"] = round(figures_of_path["p50_ratio"], 3)
        if "hybrid_p50_ratio" in figures_of_path:
            figures_of_path["hybrid_target_p50_ratio"] = HYBRID_RATIO_TARGETS[path]
            figures_of_path["meets_hybrid_target"] = figures_of_path["hybrid_p50_ratio"] <= HYBRID_RATIO_TARGETS[path]
            figures_of_path["hybrid_p50_ratio"] = round(figures_of_path["hybrid_p50_ratio"], 3)
    return paths


def bench_lookup(
    overrides: Sequence[str] = (),
    corpus: str | Path | None = None,
    min_chunks: int = 10000,
    queries: int = 60,
    echo: Callable[[str], None] = print,
    tracing_lookups: int = 60,
    profile: int = 0,
) -> dict[str, Any]:
    """
    Lookup latency of the pipeline against one embedding + one search (see the module docstring),
    then, on the same collection, lookup latency with MLflow tracing off vs on
    (`pipelines.bench.tracing.compare_tracing_overhead`: `tracing_lookups` single-thread lookups
    per mode and `tracing_lookups / 15` s of saturation per mode and round; 0 skips it), and
    `profile` lookups per path stage by stage (`pipelines.bench.lookup_profile`; 0 skips it).
    The config is composed from `overrides` with the benchmark's state, knowledge base and collection.
    """
    from pipelines.indexing import run_indexing
    from pipelines.lookup import LookupService

    files = read_corpus(resolve_corpus(corpus))
    figures: dict[str, Any] = {"load_avg_start": load_average()}
    with tempfile.TemporaryDirectory(prefix="knowledge-bench-lookup-") as tmp:
        work = Path(tmp)
        kb_root = work / "kb"
        cfg = load_bench_config(overrides, work / "state", kb_root)
        echo(f"bench lookup: repeating {len(files)} runbooks to >= {min_chunks} chunks under {work}")
        _, copies = build_repeated_kb(cfg, files, min_chunks)
        report, index_s = timed(lambda: run_indexing(cfg, rebuild=True))
        echo(f"indexed {report.collection_count} chunks in {index_s:.1f} s; classifying queries")

        service = LookupService(cfg)
        _, warm_s = timed(service.warm_up)
        settle_s = settle()
        candidates = lookup_query_candidates(files, copies)
        cases = craft_cases(service, candidates, wanted=max(queries, MIN_DISTINCT_CASES))
        embedder = service.pipeline.get_component("query_embedder")
        floors = {"floor": LookupFloor(cfg, embedder)}
        if cfg.milvus.full_text and cfg.retrieval.bm25_top_k > 0:
            floors["hybrid_floor"] = HybridFloor(cfg, embedder)
            floors["stock_hybrid"] = StockHybrid(cfg, embedder)

        paths = measure_paths(service, floors, cases, queries, echo)
        if profile > 0:
            from pipelines.bench.lookup_profile import format_profile, profile_paths

            measured = [path for path, p in paths.items() if "too_few_cases" not in p]
            table = profile_paths(service, {path: pick_cases(cases, path, profile) for path in measured})
            figures["profile"] = table
            echo(format_profile(table, profile))
        tracing = None
        if tracing_lookups > 0:
            from pipelines.bench.tracing import compare_tracing_overhead

            echo("")
            tracing = compare_tracing_overhead(
                cfg,
                [c.query for c in cases] or list(candidates.values())[0],
                latency_lookups=max(1, tracing_lookups // 3),
                seconds=tracing_lookups / 15,
                out=echo,
            )
        _cleanup_milvus(cfg)

    reasons: dict[str, int] = {}
    for case in cases:
        if case.fallback_reason:
            reasons[case.fallback_reason] = reasons.get(case.fallback_reason, 0) + 1
    figures.update(
        chunks=report.collection_count,
        copies=copies,
        index_s=round(index_s, 1),
        service_warmup_s=round(warm_s, 2),
        settle_s=round(settle_s, 1),
        top_k=cfg.retrieval.top_k,
        candidates=sum(len(texts) for texts in candidates.values()),
        crafted_queries={
            path: sum(1 for c in cases if c.path == path) for path in ("filtered", "fallback", "unfiltered")
        },
        fallback_reasons=reasons,
        paths=paths,
        tracing=tracing,
        peak_rss_mb=peak_rss_mb(),
        load_avg_end=load_average(),
    )
    echo(format_lookup_figures(figures))
    return figures


def format_lookup_figures(f: dict[str, Any]) -> str:
    crafted = ", ".join(f"{path} {n}" for path, n in f["crafted_queries"].items())
    lines = [
        f"collection        {f['chunks']} chunks ({f['copies']} copies of the corpus), top_k {f['top_k']}, "
        f"indexed in {f['index_s']} s, then {f['settle_s']} s until Milvus Lite's background work settled",
        f"crafted queries   {crafted} (by what the retrieval trace shows, {sum(f['crafted_queries'].values())} "
        f"of {f['candidates']} candidates classified); fallback reasons {f['fallback_reasons']}",
    ]
    for path, p in f["paths"].items():
        if "too_few_cases" in p:
            lines.append(f"{path:<17} {not_measured_line(path, p)}")
            continue
        verdict = "meets" if p["meets_target"] else "OVER"
        lines.append(
            f"{path:<17} pipeline p50 {p['pipeline']['p50_ms']:.1f} ms p95 {p['pipeline']['p95_ms']:.1f} ms | "
            f"floor p50 {p['floor']['p50_ms']:.1f} ms p95 {p['floor']['p95_ms']:.1f} ms | "
            f"p50 ratio {p['p50_ratio']:.3f} ({verdict} target <= {p['target_p50_ratio']}) "
            f"[{p['queries']} timed, {p['distinct_queries']} distinct]"
        )
        if "hybrid_floor" in p:
            verdict = "meets" if p["meets_hybrid_target"] else "OVER"
            lines.append(
                f"{'':<17} hybrid floor (embedding + dense + BM25 search) p50 {p['hybrid_floor']['p50_ms']:.1f} ms "
                f"p95 {p['hybrid_floor']['p95_ms']:.1f} ms | p50 ratio {p['hybrid_p50_ratio']:.3f} "
                f"({verdict} target <= {p['hybrid_target_p50_ratio']}); CPU ratio {p['hybrid_cpu_p50_ratio']:.2f}"
            )
        if "stock_hybrid" in p:
            lines.append(
                f"{'':<17} stock Haystack hybrid (dense + BM25 retrievers, DocumentJoiner) p50 "
                f"{p['stock_hybrid']['p50_ms']:.1f} ms p95 {p['stock_hybrid']['p95_ms']:.1f} ms | "
                f"pipeline / stock p50 {p['stock_hybrid_p50_ratio']:.3f} (a peer, no target)"
            )
        lines.append(
            f"{'':<17} CPU time p50: pipeline {p['pipeline']['cpu_p50_ms']:.1f} ms, floor "
            f"{p['floor']['cpu_p50_ms']:.1f} ms, ratio {p['cpu_p50_ratio']:.2f}; {format_other_cpu(p['other_cpu_share'])}"
        )
    lines += [
        f"peak RSS          {f['peak_rss_mb']:.0f} MiB",
        f"load average      {f['load_avg_start']} at start, {f['load_avg_end']} at end (1 min, whole machine)",
    ]
    return "\n".join(lines)
