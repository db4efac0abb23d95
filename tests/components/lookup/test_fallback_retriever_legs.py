"""
FallbackRetriever's searches side by side on a Milvus server (the Lite gRPC server), once the
collection is open: an attempt's BM25 leg runs in the retriever's leg threads beside its dense
leg, and the unfiltered retry's legs start beside the outscored check. Results are those of the
serial order, which Milvus Lite keeps. These are the searches of an approximate index; on this
exact (FLAT) one they run with `scan_depth=0` (the default) and `resident_max_chunks=0`, without
the one scan of an exact index. On a Milvus Lite file a lookup's dense legs come from the
collection in memory (the default) and only its BM25 legs search.
"""

import threading

import pytest

from components.contracts import FALLBACK_OUTSCORED, L0Hints, QueryTransform
from components.lookup.fallback_retriever import FallbackRetriever
from components.lookup.query_embedder import KnowledgeQueryEmbedder
from components.stores.knowledge_store import KnowledgeStore
from components.stores.light_scan import LightScan
from tests.components.lookup.test_fallback_retriever import WATERING, _outcome
from tests.helpers import MODEL

OUTSCORED = {"evidence_threshold": 0.0, "reference_threshold": 0.0, "outscored_margin": 0.05}


class SearchSpy:
    """Calls through to a real vector search and notes each call: (method, category, thread name)."""

    def __init__(self, search) -> None:
        self.calls: list[tuple[str, str | None, str]] = []
        self._lock = threading.Lock()
        for method in ("search", "bm25_search", "top_similarity"):
            setattr(search, method, self._noted(method, getattr(search, method)))

    def _noted(self, method: str, call):
        def noted(*args):
            with self._lock:
                self.calls.append((method, args[-1], threading.current_thread().name))
            return call(*args)

        return noted

    def threads_of(self, method: str, category: str | None) -> set[str]:
        return {thread for name, scope, thread in self.calls if (name, scope) == (method, category)}


def leg_thread(names: set[str]) -> bool:
    return len(names) == 1 and next(iter(names)).startswith("retrieval-leg")


def settled(retriever: FallbackRetriever) -> FallbackRetriever:
    """The retriever once every search it started has ended (a dropped retry may still run after `run`)."""
    if retriever._legs.pool is not None:
        retriever._legs.pool.shutdown(wait=True)
        retriever._legs.pool = None
    return retriever


@pytest.fixture(scope="module")
def lite_server_topics(lite_server, tmp_path_factory):
    """The two-topic KB indexed into the Lite gRPC server, with full text."""
    from pipelines.config.settings import load_config
    from pipelines.indexing import run_indexing
    from tests.conftest import SHARED_SERVER_TIMEOUT, state_overrides
    from tests.lookup_kbs import write_two_topic_kb

    root = tmp_path_factory.mktemp("topics-on-lite-server")
    kb = write_two_topic_kb(root / "kb")
    server = ["milvus=server", f"milvus.uri={lite_server.uri}", "milvus.index_type=FLAT", "milvus.full_text=true"]
    server += [SHARED_SERVER_TIMEOUT]
    cfg = load_config(state_overrides(root / "state", f"kb.path={kb}", "milvus.collection=topics_legs", *server))
    run_indexing(cfg, rebuild=True)
    return cfg


@pytest.fixture(scope="module")
def watering():
    """The query transform and embedding of the watering question (no expansion: one variant)."""
    vector = KnowledgeQueryEmbedder(model=MODEL).run(query=WATERING)["query_embedding"]
    return QueryTransform(raw=WATERING, normalized=WATERING, variants=[WATERING]), vector


def make(cfg, **params) -> FallbackRetriever:
    return FallbackRetriever(store=KnowledgeStore(cfg.milvus.uri, cfg.milvus.collection), bm25_top_k=20, **params)


def searching_apart(cfg, **params) -> FallbackRetriever:
    """A retriever whose attempts search apart, as on an approximate index."""
    return make(cfg, scan_depth=0, resident_max_chunks=0, **params)


@pytest.mark.parametrize("mode", ["sdk", "haystack"])
def test_on_a_server_a_warm_attempt_runs_its_bm25_leg_beside_the_dense_leg_with_the_same_result(
    lite_server_topics, watering, mode
):
    transform, vector = watering
    retriever = searching_apart(lite_server_topics, vector_store_mode=mode)

    def run():
        return retriever.run(query_transform=transform, hints=L0Hints(domains=["gardening"]), query_embedding=vector)

    serial = run()
    spy = SearchSpy(retriever._search(mode))
    side_by_side = run()
    assert spy.threads_of("search", "gardening") == {threading.current_thread().name}
    assert leg_thread(spy.threads_of("bm25_search", "gardening"))
    assert _outcome(side_by_side) == _outcome(serial)
    assert side_by_side["retrieval_trace"].attempts[0].legs == ["dense", "bm25"]


def test_on_milvus_lite_a_fallback_lookup_is_one_scan_in_the_lookups_thread(topics_cfg, watering, monkeypatch):
    transform, vector = watering
    retriever = make(topics_cfg, scan_depth=100, resident_max_chunks=0, **OUTSCORED)

    def run():
        return retriever.run(query_transform=transform, hints=L0Hints(domains=["databases"]), query_embedding=vector)

    run()
    spy = SearchSpy(retriever._search("sdk"))
    scans = []
    for method in ("scan", "chunks"):
        call = getattr(LightScan, method)
        noted = lambda *args, m=method, c=call: scans.append((m, threading.current_thread().name)) or c(*args)  # noqa: E731
        monkeypatch.setattr(LightScan, method, noted)
    assert run()["retrieval_trace"].fallback_reason == FALLBACK_OUTSCORED
    settled(retriever)
    # The filtered attempt, the check and the retry all read the scan: no other search runs.
    assert spy.calls == [] and [name for name, _ in scans if name != "chunks"] == ["scan"]
    # Lite searches hold this process's interpreter: side by side they only slow each other.
    assert {thread for _, thread in scans} == {threading.current_thread().name}


def test_on_milvus_lite_a_fallback_lookup_in_memory_makes_no_search_with_the_same_result(topics_cfg, watering):
    transform, vector = watering
    retriever, apart = make(topics_cfg, **OUTSCORED), searching_apart(topics_cfg, **OUTSCORED)

    def run(of):
        return of.run(query_transform=transform, hints=L0Hints(domains=["databases"]), query_embedding=vector)

    run(retriever)  # opens the collection and reads it into memory
    spy = SearchSpy(retriever._search("sdk"))
    in_memory = run(retriever)
    assert in_memory["retrieval_trace"].fallback_reason == FALLBACK_OUTSCORED
    # Every leg (dense and BM25, filtered, then not) and the check come from memory.
    assert spy.calls == []
    assert [attempt.legs for attempt in in_memory["retrieval_trace"].attempts] == [["dense", "bm25"]] * 2
    assert _outcome(in_memory) == _outcome(run(apart))


def test_on_milvus_lite_an_unfiltered_lookup_in_memory_makes_no_search_with_the_same_result(topics_cfg, watering):
    transform, vector = watering
    retriever, apart = make(topics_cfg, **OUTSCORED), searching_apart(topics_cfg, **OUTSCORED)

    def run(of):
        return of.run(query_transform=transform, hints=L0Hints(), query_embedding=vector)

    run(retriever)  # opens the collection and reads it into memory
    spy = SearchSpy(retriever._search("sdk"))
    in_memory = run(retriever)
    # The one attempt's dense and BM25 legs come from memory.
    assert spy.calls == []
    assert [(a.category_filter, a.legs) for a in in_memory["retrieval_trace"].attempts] == [(None, ["dense", "bm25"])]
    searched = run(apart)
    assert in_memory["candidates"] == searched["candidates"]  # in order, scores, BM25 ranks and hit reasons
    assert in_memory["retrieval_trace"].attempts[0].top_hits == searched["retrieval_trace"].attempts[0].top_hits


def test_on_a_server_the_retry_starts_beside_the_outscored_check_with_the_same_result(
    lite_server_topics, topics_cfg, watering
):
    transform, vector = watering
    retriever = searching_apart(lite_server_topics, **OUTSCORED)

    def run():
        return retriever.run(query_transform=transform, hints=L0Hints(domains=["databases"]), query_embedding=vector)

    serial = run()
    spy = SearchSpy(retriever._search("sdk"))
    speculative = run()
    settled(retriever)
    assert speculative["retrieval_trace"].fallback_reason == FALLBACK_OUTSCORED
    assert leg_thread(spy.threads_of("search", None)) and leg_thread(spy.threads_of("bm25_search", None))
    assert _outcome(speculative) == _outcome(serial)
    on_file = make(topics_cfg, **OUTSCORED).run(
        query_transform=transform, hints=L0Hints(domains=["databases"]), query_embedding=vector
    )
    assert _outcome(speculative) == _outcome(on_file)


def test_on_a_server_a_filtered_attempt_that_stands_after_the_check_drops_the_started_retry(
    lite_server_topics, watering
):
    transform, vector = watering
    retriever = searching_apart(lite_server_topics, outscored_margin=0.05, outscored_check_below=1.0)

    def run():
        return retriever.run(query_transform=transform, hints=L0Hints(domains=["gardening"]), query_embedding=vector)

    serial = run()
    spy = SearchSpy(retriever._search("sdk"))
    out = run()
    settled(retriever)
    trace = out["retrieval_trace"]
    assert trace.selected_attempt == 0 and trace.fallback_reason is None and len(trace.attempts) == 1
    assert trace.attempts[0].unfiltered_top_similarity is not None  # the check ran
    assert leg_thread(spy.threads_of("search", None))  # the retry was started, then dropped
    assert {c.category for c in out["candidates"]} == {"gardening"}
    assert _outcome(out) == _outcome(serial)
