"""The two vector-search paths over one collection: the same candidates, explicit score semantics, filters."""

import numpy as np
import pytest

from components.common.scoring import HAYSTACK_SCORE_LABEL, SDK_SCORE_LABEL
from components.contracts import IndexPlan
from components.indexing.milvus_writer import MilvusChunkWriter
from components.stores.knowledge_store import KnowledgeStore
from components.stores.milvus_collection import connect
from components.stores.milvus_errors import CollectionMismatchError
from components.stores.vector_search import (
    HaystackVectorSearch,
    SdkVectorSearch,
    UnsupportedFilterError,
    as_float_list,
    make_search,
)
from tests.components.chunks import chunk, short_field_collection, unit

CHUNKS = [
    chunk("disk/full.md", 0, [1, 0, 0, 0], "disk", keywords=["df"], entities=[{"name": "ext4", "aliases": []}]),
    chunk("disk/full.md", 1, [1, 1, 0, 0], "disk"),
    chunk("db/lag.md", 0, [0, 1, 0, 0], "db"),
    chunk("db/lock.md", 0, [0, 0, 1, 0], "db"),
]
QUERY = [1.0, 0.0, 0.0, 0.0]


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("search") / "milvus.db")
    MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="kb")).run(documents=CHUNKS, plan=IndexPlan())
    short_field_collection(uri, "no_category", None)
    MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="no_category")).run(documents=CHUNKS, plan=IndexPlan())
    return uri


def searches(uri: str, collection: str = "kb"):
    return [
        SdkVectorSearch(KnowledgeStore(uri=uri, collection=collection)),
        HaystackVectorSearch(KnowledgeStore(uri=uri, collection=collection)),
    ]


def test_the_sdk_path_returns_candidates_nearest_first_with_the_l2_distance(uri):
    candidates = SdkVectorSearch(KnowledgeStore(uri=uri, collection="kb")).search(QUERY, 3, None)
    assert [c.evidence_key for c in candidates] == ["disk/full.md#0", "disk/full.md#1", "db/lag.md#0"]
    first, second, third = candidates
    assert (first.raw_score, first.similarity) == pytest.approx((0.0, 1.0), abs=1e-5)
    cosine = float(np.dot(QUERY, unit(1, 1, 0, 0)))
    assert second.raw_score == pytest.approx(2 - 2 * cosine, abs=1e-5)
    assert second.similarity == pytest.approx(cosine, abs=1e-5)
    assert third.similarity == pytest.approx(0.0, abs=1e-5)
    assert {c.raw_score_label for c in candidates} == {SDK_SCORE_LABEL} and {c.path for c in candidates} == {"sdk"}


def test_candidates_carry_the_chunk_metadata(uri):
    (first,) = SdkVectorSearch(KnowledgeStore(uri=uri, collection="kb")).search(QUERY, 1, None)
    assert first.source == "disk/full.md" and first.content == "chunk 0 of disk/full.md"
    assert first.title == "Title of disk/full.md" and first.breadcrumb == "Title of disk/full.md > Part 0"
    assert first.category == "disk" and first.chunk_index == 0 and first.tokens == 4
    assert first.keywords == ["df"] and first.entities == ["ext4"]
    assert first.terms == frozenset({"chunk", "disk/full.md"})


def test_the_haystack_path_finds_the_same_chunks_with_its_own_raw_score(uri):
    sdk = {c.evidence_key: c for c in SdkVectorSearch(KnowledgeStore(uri=uri, collection="kb")).search(QUERY, 4, None)}
    haystack = HaystackVectorSearch(KnowledgeStore(uri=uri, collection="kb")).search(QUERY, 4, None)
    assert {c.evidence_key for c in haystack} == set(sdk)
    for candidate in haystack:
        assert candidate.path == "haystack" and candidate.raw_score_label == HAYSTACK_SCORE_LABEL
        assert candidate.similarity == pytest.approx(sdk[candidate.evidence_key].similarity, abs=1e-4)
        assert candidate.raw_score == pytest.approx(1 - sdk[candidate.evidence_key].raw_score / 4, abs=1e-4)
        assert candidate.source == sdk[candidate.evidence_key].source


@pytest.mark.parametrize("path", [0, 1])
def test_a_category_filter_keeps_only_that_category(uri, path):
    search = searches(uri)[path]
    assert {c.category for c in search.search(QUERY, 4, "db")} == {"db"}
    assert search.describe_filter("db") == 'category == "db"'
    assert search.describe_filter(None) is None


def test_without_a_category_column_the_sdk_path_filters_on_the_metadata_key(uri):
    search = SdkVectorSearch(KnowledgeStore(uri=uri, collection="no_category"))
    candidates = search.search(QUERY, 4, "db")
    assert {c.source for c in candidates} == {"db/lag.md", "db/lock.md"} and {c.category for c in candidates} == {"db"}
    assert search.describe_filter("db") == 'metadata["category"] == "db"'


def test_without_a_category_column_the_haystack_path_refuses_a_filter(uri):
    search = HaystackVectorSearch(KnowledgeStore(uri=uri, collection="no_category"))
    assert len(search.search(QUERY, 4, None)) == 4
    with pytest.raises(UnsupportedFilterError, match="no category column"):
        search.search(QUERY, 4, "db")
    assert search.describe_filter("db") is None


@pytest.mark.parametrize("path", [0, 1])
def test_a_missing_collection_is_an_error_and_is_not_created(uri, path):
    search = searches(uri, "absent")[path]
    with pytest.raises(LookupError, match="collection absent does not exist .*run `knowledge index`"):
        search.search(QUERY, 3, None)
    assert not connect(uri).has_collection("absent")


@pytest.mark.parametrize("path", [0, 1])
def test_a_query_of_another_dimension_is_refused(uri, path):
    with pytest.raises(CollectionMismatchError, match="4-d vectors but the embedder gives 3-d"):
        searches(uri)[path].search([1.0, 0.0, 0.0], 3, None)


def test_make_search_builds_each_path_and_refuses_others(uri):
    assert isinstance(
        make_search("sdk", KnowledgeStore(uri=uri, collection="kb", index_type="FLAT", search_params=None)),
        SdkVectorSearch,
    )
    haystack = make_search(
        "haystack",
        KnowledgeStore(uri=uri, collection="kb", index_type="FLAT", search_params={"nprobe": 4}, timeout_ms=500),
    )
    assert isinstance(haystack, HaystackVectorSearch) and haystack.store.search_params == {"nprobe": 4}
    with pytest.raises(ValueError, match="unknown vector store path 'spring'; one of sdk, haystack"):
        make_search("spring", KnowledgeStore(uri=uri, collection="kb", index_type="FLAT", search_params=None))


def test_as_float_list_takes_arrays_and_sequences():
    assert as_float_list(np.asarray([1, 2], dtype=np.float32)) == [1.0, 2.0]
    assert as_float_list((1, 2)) == [1.0, 2.0] and all(type(x) is float for x in as_float_list((1, 2)))


def break_connection(search) -> None:
    """Close the client under a search, as a Milvus server that went away leaves it: every call fails."""
    client = search._client if isinstance(search, SdkVectorSearch) else search._retriever.document_store.client
    client.close()


@pytest.mark.parametrize("path", ["sdk", "haystack"])
def test_a_search_whose_connection_broke_fails_once_then_reconnects(uri, path):
    search = make_search(path, KnowledgeStore(uri=uri, collection="kb", index_type="FLAT", search_params=None))
    assert search.search(QUERY, 1, None)
    break_connection(search)
    with pytest.raises(Exception):  # noqa: B017 (whatever pymilvus raises on a closed client)
        search.search(QUERY, 1, None)
    assert [c.evidence_key for c in search.search(QUERY, 1, None)] == ["disk/full.md#0"]
