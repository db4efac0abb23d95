"""IndexPlanner: what an indexing run adds, updates, keeps and removes, from the stored chunks."""

import pytest
from haystack import Document

from components.contracts import IndexPlan
from components.indexing.index_planner import IndexPlanner, fingerprinted_hash
from components.indexing.milvus_writer import MilvusChunkWriter
from components.stores.knowledge_store import KnowledgeStore
from components.stores.milvus_auth import MilvusAuth, env_secret
from tests.components.chunks import chunk
from tests.components.refusals import assert_refused
from tests.helpers import assert_round_trips

FINGERPRINT = "minilm/200/32"


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("planner") / "milvus.db")


def document(source: str, doc_hash: str) -> Document:
    return Document(content=f"text of {source}", meta={"source": source, "doc_hash": doc_hash})


def store(uri: str, collection: str, documents: dict[str, tuple[str, int]], lost: tuple[str, ...] = ()) -> None:
    """
    Index each source's chunks as an earlier run left them ({source: (doc_hash, chunk count)}),
    without the chunk ids in `lost`, as a run interrupted between two insert batches leaves them.
    """
    chunks = []
    for number, (source, (doc_hash, count)) in enumerate(documents.items()):
        index_hash = fingerprinted_hash(doc_hash, FINGERPRINT)
        chunks.extend(
            chunk(source, index, [1, number, index, 0], doc_hash=doc_hash, index_hash=index_hash)
            for index in range(count)
        )
    MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection=collection)).run(documents=chunks, plan=IndexPlan())
    if lost:
        MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection=collection)).run(
            documents=[], plan=IndexPlan(stale_ids=list(lost))
        )


def test_every_document_gets_its_fingerprinted_hash(uri):
    documents = [document("a.md", "h1")]
    IndexPlanner(store=KnowledgeStore(uri=uri, collection="fresh"), fingerprint=FINGERPRINT).run(documents=documents)
    assert documents[0].meta["index_hash"] == fingerprinted_hash("h1", FINGERPRINT)
    assert fingerprinted_hash("h1", FINGERPRINT) != fingerprinted_hash("h1", "minilm/300/32")


def test_without_a_collection_everything_is_added(uri):
    documents = [document("a.md", "h1"), document("b.md", "h2")]
    result = IndexPlanner(store=KnowledgeStore(uri=uri, collection="fresh"), fingerprint=FINGERPRINT).run(
        documents=documents
    )
    assert result["plan"] == IndexPlan(added=["a.md", "b.md"])
    assert result["documents"] == documents


def test_a_rebuild_adds_everything_without_reading_the_store():
    documents = [document("a.md", "h1")]
    # A URI nobody answers on: a rebuild must not even connect.
    planner = IndexPlanner(
        store=KnowledgeStore(uri="http://127.0.0.1:9", collection="kb", timeout_ms=100), fingerprint=FINGERPRINT
    )
    result = planner.run(documents=documents, rebuild=True)
    assert result["plan"] == IndexPlan(added=["a.md"], rebuild=True)
    assert result["documents"] == documents


def test_unchanged_updated_added_and_removed_documents(uri):
    store(uri, "mixed", {"same.md": ("h1", 2), "changed.md": ("h2", 1), "gone.md": ("h3", 2)})
    documents = [document("same.md", "h1"), document("changed.md", "h2-new"), document("new.md", "h4")]
    result = IndexPlanner(store=KnowledgeStore(uri=uri, collection="mixed"), fingerprint=FINGERPRINT).run(
        documents=documents
    )

    plan = result["plan"]
    assert (plan.added, plan.updated, plan.unchanged, plan.removed) == (
        ["new.md"],
        ["changed.md"],
        ["same.md"],
        ["gone.md"],
    )
    assert sorted(plan.stale_ids) == ["changed.md#0", "gone.md#0", "gone.md#1"]
    assert [d.meta["source"] for d in result["documents"]] == ["changed.md", "new.md"]


def test_another_fingerprint_reindexes_every_document(uri):
    store(uri, "refingerprinted", {"a.md": ("h1", 1)})
    planner = IndexPlanner(
        store=KnowledgeStore(uri=uri, collection="refingerprinted"), fingerprint="another-model/200/32"
    )
    plan = planner.run(documents=[document("a.md", "h1")])["plan"]
    assert plan.updated == ["a.md"] and plan.stale_ids == ["a.md#0"]


def test_a_document_with_fewer_chunks_than_it_counts_is_reindexed(uri):
    store(uri, "interrupted", {"a.md": ("h1", 3), "b.md": ("h2", 2)}, lost=("a.md#2",))
    plan = IndexPlanner(store=KnowledgeStore(uri=uri, collection="interrupted"), fingerprint=FINGERPRINT).run(
        documents=[document("a.md", "h1"), document("b.md", "h2")]
    )["plan"]
    assert plan.updated == ["a.md"] and plan.unchanged == ["b.md"]
    assert sorted(plan.stale_ids) == ["a.md#0", "a.md#1"]


def test_round_trips():
    assert_round_trips(IndexPlanner(store=KnowledgeStore(uri="/data/kb.db", collection="kb"), fingerprint=FINGERPRINT))
    assert_round_trips(
        IndexPlanner(store=KnowledgeStore(uri="http://127.0.0.1:19530", collection="kb", timeout_ms=2000))
    )
    assert_round_trips(
        IndexPlanner(
            store=KnowledgeStore(
                uri="http://127.0.0.1:19530",
                collection="kb",
                auth=MilvusAuth(token=env_secret("token"), secure=True, server_pem_path="/certs/milvus.pem"),
            )
        )
    )


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("store", "milvus.db", "must be a KnowledgeStore"),
    ("fingerprint", None, "must be a string"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(
        lambda **changed: IndexPlanner(**{**{"store": KnowledgeStore(uri="milvus.db")}, **changed}),
        parameter,
        value,
        rule,
    )
