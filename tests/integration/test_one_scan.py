"""
On the runbook corpus (Milvus Lite, exact): a category's hits in the lookup's one unfiltered scan
are exactly the filtered search's, for the dense leg and for BM25 (statistics no filter changes), in
every category, and so are its dense and BM25 hits from the collection held in memory (the BM25
ones also for eval queries, filtered and not); a retriever served by either returns what one
searching apart returns.
"""

import dataclasses
import json
from pathlib import Path

import pytest

from components.contracts import L0Hints, QueryTransform
from components.lookup.fallback_retriever import FallbackRetriever
from components.lookup.hybrid_scan import HybridScan
from components.lookup.query_embedder import KnowledgeQueryEmbedder
from components.lookup.resident_scan import ResidentScan
from components.stores.resident_rows import ResidentCollection
from pipelines.config.settings import knowledge_store
from tests.components.lookup.test_fallback_retriever import _outcome
from tests.helpers import MODEL

pytestmark = pytest.mark.corpus
TOP_K = 20


def categories(runbooks_dir) -> list[str]:
    return sorted(path.name for path in runbooks_dir.iterdir() if path.is_dir() and not path.name.startswith("."))


def queries(runbooks_dir, category: str) -> list[str]:
    """A runbook's own name, in words, and a text about something else, whose category hits rank deep."""
    name = sorted(runbooks_dir.joinpath(category).glob("*.md"))[0].stem
    return [name, "the pods restart and the disk fills up while certificates expire"]


@pytest.fixture(scope="module")
def embedder():
    return KnowledgeQueryEmbedder(model=MODEL)


def untimed(out: dict) -> list:
    """The attempts of a run as the trace records them, but for when they ran."""
    return [dataclasses.replace(a, started_ns=None, ended_ns=None) for a in out["retrieval_trace"].attempts]


def hits_of(pending) -> list:
    return pending.result() if pending is not None else None


@pytest.mark.parametrize("depth", [100, 10_000])
def test_a_categorys_hits_in_the_unfiltered_scan_are_the_filtered_searchs(runbooks_cfg, runbooks_dir, embedder, depth):
    cfg, _ = runbooks_cfg
    search = knowledge_store(cfg).vector_search("sdk")
    assert search.layout.index_type == "FLAT" and HybridScan.serves(search)
    served = 0
    for category in categories(runbooks_dir):
        for query in queries(runbooks_dir, category):
            vector = embedder.run(query=query)["query_embedding"]
            dense, bm25 = HybridScan(search, query, vector, depth, TOP_K, TOP_K).first_legs(category)
            if dense is not None:
                candidates, _, _ = dense.result()
                filtered = search.search(vector, TOP_K, category)
                assert [(c.evidence_key, c.raw_score, c.similarity) for c in candidates] == [
                    (c.evidence_key, c.raw_score, c.similarity) for c in filtered
                ], (category, query)
                served += 1
            if bm25 is not None:
                filtered = search.bm25_search(query, vector, TOP_K, category)
                assert [(h.key, h.score, h.rank, h.candidate.similarity) for h in hits_of(bm25)] == [
                    (h.key, h.score, h.rank, h.candidate.similarity) for h in filtered
                ], (category, query)
                served += 1
    # The whole collection deep, every view is served; 100 deep, most are.
    assert served == 4 * len(categories(runbooks_dir)) if depth > 1000 else served > 0


def test_a_categorys_hits_in_memory_are_the_filtered_searchs(runbooks_cfg, runbooks_dir, embedder):
    cfg, _ = runbooks_cfg
    search = knowledge_store(cfg).vector_search("sdk")
    resident = ResidentCollection(search, 100_000)
    rows = resident.current()
    assert len(rows) == search.store.row_count() and rows.bm25 is not None
    for category in categories(runbooks_dir):
        for query in queries(runbooks_dir, category):
            vector = embedder.run(query=query)["query_embedding"]
            scan = ResidentScan(resident, rows, query, vector, TOP_K, TOP_K)
            dense, bm25 = scan.first_legs(category)
            candidates, _, _ = dense.result()
            assert candidates == search.search(vector, TOP_K, category), (category, query)
            assert bm25.result() == search.bm25_search(query, vector, TOP_K, category), (category, query)
            assert scan.top_similarity() == search.top_similarity(vector, None)


def eval_queries(per_set: int = 4) -> list[str]:
    """The first queries of every eval set."""
    found = []
    for path in sorted(Path(__file__).parents[2].joinpath("eval").glob("*.jsonl")):
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        found += [json.loads(line)["query"] for line in lines[:per_set]]
    return found


def test_the_bm25_hits_in_memory_are_milvus_lites_for_eval_queries_in_every_category_and_unfiltered(
    runbooks_cfg, runbooks_dir
):
    cfg, _ = runbooks_cfg
    search = knowledge_store(cfg).vector_search("sdk")
    rows = ResidentCollection(search, 100_000).current()
    compared = 0
    for query in eval_queries():
        for category in [*categories(runbooks_dir), None]:
            hits = search.search_text(query, TOP_K, search.describe_filter(category) or "", [])
            in_memory = rows.bm25_ranked(query, TOP_K, category)
            assert [rows.rows[position]["id"] for position, _ in in_memory] == [hit["id"] for hit in hits]
            assert [distance for _, distance in in_memory] == pytest.approx([hit["distance"] for hit in hits], abs=1e-5)
            compared += bool(hits)
    assert compared > 100


SCANS = {"scan": {"scan_depth": 100, "resident_max_chunks": 0}, "in memory": {"scan_depth": 0}}


@pytest.mark.parametrize("scan", SCANS.values(), ids=SCANS.keys())
def test_a_retriever_served_by_the_scan_returns_what_one_searching_apart_returns(
    runbooks_cfg, runbooks_dir, embedder, scan
):
    cfg, _ = runbooks_cfg
    store = knowledge_store(cfg)
    scanning = FallbackRetriever(store=store, **scan)
    apart = FallbackRetriever(store=store, scan_depth=0, resident_max_chunks=0)
    outcomes = 0
    for category in categories(runbooks_dir):
        for query in queries(runbooks_dir, category):
            transform = QueryTransform(raw=query, normalized=query, variants=[query])
            vector = embedder.run(query=query)["query_embedding"]
            runs = [
                retriever.run(query_transform=transform, hints=L0Hints(domains=[category]), query_embedding=vector)
                for retriever in (scanning, apart, scanning)  # the first run opens the collection
            ]
            assert _outcome(runs[2]) == _outcome(runs[1]), (category, query)
            assert untimed(runs[2]) == untimed(runs[1]), (category, query)
            assert [(c.evidence_key, c.bm25_rank, c.hit_reasons) for c in runs[2]["candidates"]] == [
                (c.evidence_key, c.bm25_rank, c.hit_reasons) for c in runs[1]["candidates"]
            ]
            outcomes += 1
    assert outcomes == 2 * len(categories(runbooks_dir))
    assert (scanning._one_scan._resident is not None) == ("resident_max_chunks" not in scan)


def test_a_filtered_attempt_over_half_that_the_unfiltered_best_outscores_is_retried(runbooks_cfg):
    from pipelines.lookup import LookupService

    cfg, _ = runbooks_cfg
    # The filter takes "alertmanager" from the text; the right runbook is Prometheus's.
    query = "after a networkpolicy change prometheus isn't talking to any alertmanager at all, 0 discovered"
    trace = LookupService(cfg).lookup(query).to_dict()["retrievalTrace"]  # the searches apart (the default)
    filtered, retry = trace["attempts"]
    assert filtered["category"] == "alertmanager" and filtered["topSimilarity"] > 0.5
    assert filtered["unfilteredTopSimilarity"] - filtered["topSimilarity"] >= 0.05
    assert trace["fallbackReason"] == "filtered_vector_outscored" and retry["outcome"] == "selected"
