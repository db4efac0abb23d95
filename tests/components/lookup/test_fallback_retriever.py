"""FallbackRetriever against a real Milvus Lite collection (the two-topic KB of the session)."""

import pytest

from components.contracts import FALLBACK_LOW_QUALITY, FALLBACK_NO_EVIDENCE, L0Hints, QueryTransform
from components.lookup.fallback_retriever import FallbackRetriever
from components.lookup.query_embedder import KnowledgeQueryEmbedder
from tests.helpers import MODEL, assert_round_trips

WATERING = "how often should tomato plants be watered"


@pytest.fixture(scope="module")
def embed():
    embedder = KnowledgeQueryEmbedder(model=MODEL)

    def _embed(text: str):
        return QueryTransform(raw=text, normalized=text, variants=[text]), embedder.run(texts=[text])["embeddings"]

    return _embed


def retriever(cfg, **params) -> FallbackRetriever:
    return FallbackRetriever(uri=cfg.milvus.uri, collection=cfg.milvus.collection, **params)


def test_one_domain_gives_a_filtered_attempt_that_stands(topics_cfg, embed):
    transform, vectors = embed(WATERING)
    out = retriever(topics_cfg).run(query_transform=transform, hints=L0Hints(domains=["gardening"]), embeddings=vectors)
    trace = out["retrieval_trace"]
    assert [a.category_filter for a in trace.attempts] == ["gardening"]
    assert trace.selected_attempt == 0 and trace.fallback_reason is None
    assert {c.category for c in out["candidates"]} == {"gardening"}


def test_no_domain_gives_one_unfiltered_attempt(topics_cfg, embed):
    transform, vectors = embed(WATERING)
    out = retriever(topics_cfg).run(query_transform=transform, hints=L0Hints(), embeddings=vectors)
    assert [a.category_filter for a in out["retrieval_trace"].attempts] == [None]
    assert out["candidates"][0].source == "gardening/watering-tomatoes.md"


def test_a_weak_filtered_attempt_is_retried_without_the_filter(topics_cfg, embed):
    transform, vectors = embed(WATERING)
    out = retriever(topics_cfg, reference_threshold=0.99).run(
        query_transform=transform, hints=L0Hints(domains=["databases"]), embeddings=vectors
    )
    trace = out["retrieval_trace"]
    assert [a.category_filter for a in trace.attempts] == ["databases", None]
    assert trace.fallback_reason in {FALLBACK_LOW_QUALITY, FALLBACK_NO_EVIDENCE}
    assert trace.selected_attempt == 1
    assert out["candidates"][0].source == "gardening/watering-tomatoes.md"


def test_a_filtered_attempt_without_usable_candidates_records_no_evidence(topics_cfg, embed):
    transform, vectors = embed(WATERING)
    out = retriever(topics_cfg, evidence_threshold=0.95, reference_threshold=0.95).run(
        query_transform=transform, hints=L0Hints(domains=["databases"]), embeddings=vectors
    )
    assert out["retrieval_trace"].fallback_reason == FALLBACK_NO_EVIDENCE


def test_l1_disabled_searches_nothing(topics_cfg, embed):
    transform, vectors = embed(WATERING)
    out = retriever(topics_cfg, l1_enabled=False).run(
        query_transform=transform, hints=L0Hints(domains=["gardening"]), embeddings=vectors
    )
    assert out["candidates"] == [] and out["retrieval_trace"].attempts == []


def test_uncovered_terms_raise_the_evidence_bar(topics_cfg):
    component = retriever(topics_cfg, evidence_threshold=0.35, uncovered_evidence_threshold=0.5)
    assert component.evidence_bar(L0Hints()) == 0.35
    assert component.evidence_bar(L0Hints(uncovered_terms=["redis"])) == 0.5


def test_an_unknown_mode_is_refused(topics_cfg):
    with pytest.raises(ValueError, match="vector_store_mode"):
        retriever(topics_cfg, vector_store_mode="spring")


def test_round_trips(topics_cfg):
    assert_round_trips(retriever(topics_cfg, top_k=7, vector_store_mode="auto", search_params={"nprobe": 4}))
