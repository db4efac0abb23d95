"""MilvusChunkWriter: creating the collection, inserts, deletes, rebuilds and refused chunks."""

import pytest

from components.contracts import IndexPlan
from components.indexing.milvus_writer import MilvusChunkWriter
from components.stores.knowledge_store import KnowledgeStore
from components.stores.milvus_auth import MilvusAuth, env_secret
from components.stores.milvus_collection import SPARSE_FIELD, connect, describe_layout
from components.stores.milvus_errors import CollectionMismatchError
from tests.components.chunks import DIM, chunk, short_field_collection
from tests.components.refusals import assert_refused
from tests.helpers import assert_round_trips


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """One Milvus Lite file for the module; each test writes its own collection."""
    return str(tmp_path_factory.mktemp("writer") / "milvus.db")


def rows(uri: str, collection: str) -> dict[str, dict]:
    client = connect(uri)
    found = client.query(collection, filter="", output_fields=["id", "content", "metadata", "category"])
    return {row["id"]: row for row in found}


def test_the_first_write_creates_the_collection_and_stores_each_chunk(uri):
    chunks = [chunk("a.md", 0, [1, 0, 0, 0]), chunk("a.md", 1, [0, 1, 0, 0]), chunk("b.md", 0, [0, 0, 1, 0], "db")]
    result = MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="created")).run(
        documents=chunks, plan=IndexPlan()
    )
    assert result == {"written": 3, "deleted": 0, "count": 3, "notes": []}

    layout = describe_layout(connect(uri), "created")
    assert (layout.dim, layout.metric, layout.index_type, layout.has_category) == (DIM, "L2", "FLAT", True)
    stored = rows(uri, "created")
    assert stored["b.md#0"]["category"] == "db" and stored["b.md#0"]["content"] == "chunk 0 of b.md"
    metadata = stored["a.md#1"]["metadata"]
    assert metadata["source"] == "a.md" and metadata["chunk_index"] == 1 and metadata["evidence_key"] == "a.md#1"
    assert metadata["chunk_count"] == 2 and stored["b.md#0"]["metadata"]["chunk_count"] == 1
    assert "embedding" not in metadata and metadata["keywords"] is None  # a fixed key set, absent keys as None


def test_stale_ids_are_deleted_before_the_new_chunks_are_written(uri):
    writer = MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="updated"))
    quoted = 'it"s.md'  # ids are quoted in the delete expression, never parsed
    writer.run(documents=[chunk("a.md", 0, [1, 0, 0, 0]), chunk(quoted, 0, [0, 1, 0, 0])], plan=IndexPlan())

    plan = IndexPlan(updated=["a.md"], removed=[quoted], stale_ids=["a.md#0", f"{quoted}#0"])
    new = chunk("a.md", 0, [0, 0, 1, 0], content="new text")
    assert writer.run(documents=[new], plan=plan) == {"written": 1, "deleted": 2, "count": 1, "notes": []}
    assert rows(uri, "updated")["a.md#0"]["content"] == "new text"


def test_a_rebuild_drops_what_the_collection_held(uri):
    writer = MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="rebuilt"))
    writer.run(documents=[chunk("old.md", 0, [1, 0, 0, 0])], plan=IndexPlan())
    result = writer.run(documents=[chunk("new.md", 0, [0, 1, 0, 0])], plan=IndexPlan(added=["new.md"], rebuild=True))
    assert result == {"written": 1, "deleted": 0, "count": 1, "notes": []}
    assert list(rows(uri, "rebuilt")) == ["new.md#0"]


def test_nothing_to_write_creates_no_collection(uri):
    result = MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="never")).run(
        documents=[], plan=IndexPlan(stale_ids=["x#0"])
    )
    assert result == {"written": 0, "deleted": 0, "count": 0, "notes": []}
    assert not connect(uri).has_collection("never")


def test_vectors_of_another_dimension_are_refused_naming_both(uri):
    writer = MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="four"))
    writer.run(documents=[chunk("a.md", 0, [1, 0, 0, 0])], plan=IndexPlan())
    wider = chunk("b.md", 0, [1, 0, 0, 0, 1])
    with pytest.raises(CollectionMismatchError, match="4-d vectors but the embedder gives 5-d"):
        writer.run(documents=[wider], plan=IndexPlan())
    assert list(rows(uri, "four")) == ["a.md#0"]


def test_a_collection_without_the_category_column_gets_chunks_without_it(uri):
    short_field_collection(uri, "no_category", None)
    result = MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="no_category")).run(
        documents=[chunk("a.md", 0, [1, 0, 0, 0], "disk")], plan=IndexPlan()
    )
    assert result["written"] == 1
    stored = connect(uri).query("no_category", filter="", output_fields=["metadata"])
    assert stored[0]["metadata"]["category"] == "disk"


def test_a_category_longer_than_the_column_is_refused_before_any_insert(uri):
    short_field_collection(uri, "short_category", 8)
    chunks = [chunk("a.md", 0, [1, 0, 0, 0], "disk"), chunk("b.md", 0, [0, 1, 0, 0], "networking")]
    with pytest.raises(CollectionMismatchError, match="the category of b.md is longer.*\\(8 characters\\)"):
        MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="short_category")).run(
            documents=chunks, plan=IndexPlan()
        )
    assert rows(uri, "short_category") == {}


def test_full_text_creates_the_bm25_field_that_milvus_fills_from_content(uri):
    writer = MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="full_text", full_text=True))
    chunks = [chunk("a.md", 0, [1, 0, 0, 0], content="the zorblaxctl archiver"), chunk("b.md", 0, [0, 1, 0, 0])]
    assert writer.run(documents=chunks, plan=IndexPlan())["notes"] == []
    client = connect(uri)
    assert describe_layout(client, "full_text").has_sparse
    hits = client.search(
        "full_text", data=["zorblaxctl"], anns_field=SPARSE_FIELD, limit=2, search_params={"metric_type": "BM25"}
    )[0]
    assert [hit["id"] for hit in hits] == ["a.md#0"]


def test_an_incremental_run_never_adds_the_full_text_field_and_says_how(uri):
    MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="dense_only", full_text=False)).run(
        documents=[chunk("a.md", 0, [1, 0, 0, 0])], plan=IndexPlan()
    )
    writer = MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="dense_only", full_text=True))
    result = writer.run(documents=[chunk("b.md", 0, [0, 1, 0, 0])], plan=IndexPlan(added=["b.md"]))
    (note,) = result["notes"]
    assert "has no sparse field" in note and "knowledge index --rebuild" in note
    assert not describe_layout(connect(uri), "dense_only").has_sparse  # the schema is unchanged
    rebuilt = writer.run(documents=[chunk("a.md", 0, [1, 0, 0, 0])], plan=IndexPlan(added=["a.md"], rebuild=True))
    assert rebuilt["notes"] == [] and describe_layout(connect(uri), "dense_only").has_sparse


def test_round_trips():
    assert_round_trips(
        MilvusChunkWriter(
            store=KnowledgeStore(uri="/data/kb.db", collection="kb", index_type="IVF_FLAT", index_params={"nlist": 16})
        )
    )
    assert_round_trips(MilvusChunkWriter(store=KnowledgeStore(uri="/data/kb.db", collection="kb", full_text=True)))
    assert_round_trips(
        MilvusChunkWriter(store=KnowledgeStore(uri="http://127.0.0.1:19530", collection="kb", timeout_ms=2000))
    )
    assert_round_trips(
        MilvusChunkWriter(
            store=KnowledgeStore(
                uri="http://127.0.0.1:19530",
                collection="kb",
                auth=MilvusAuth(token=env_secret("token"), secure=True, server_pem_path="/certs/milvus.pem"),
            )
        )
    )


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("store", None, "must be a KnowledgeStore"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(
        lambda **changed: MilvusChunkWriter(**{**{"store": KnowledgeStore(uri="milvus.db")}, **changed}),
        parameter,
        value,
        rule,
    )
