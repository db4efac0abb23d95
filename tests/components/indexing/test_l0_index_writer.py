"""L0IndexWriter: entries from every document, summary vectors reused or embedded, the index saved."""

import numpy as np
import pytest
from haystack import Document
from sentence_transformers import SentenceTransformer

from components.common.embedding_models import resolve_model
from components.contracts import EntityRef
from components.indexing.l0_index_writer import SUMMARY_CHARS, L0IndexWriter, l0_index_of, summary_text
from components.stores.l0_index import L0Index
from components.stores.l0_index_file import load_l0_index, save_l0_index
from tests.components.refusals import assert_refused
from tests.helpers import MODEL, assert_round_trips


def document(source: str, title: str, category: str, body: str, doc_hash: str = "", **meta) -> Document:
    return Document(
        content=body, meta={"source": source, "title": title, "category": category, "doc_hash": doc_hash, **meta}
    )


DOCUMENTS = [
    document(
        "database/lag.md",
        "PostgreSQL Replication Lag",
        "database",
        "# PostgreSQL Replication Lag\n\nThe standby falls behind.\n\n## Diagnosis\nCheck the WAL on the database.\n",
        "h-lag",
        keywords=["wal"],
        entities=[{"name": "PostgreSQL", "aliases": ["pg"]}],
    ),
    document(
        "disk/full.md",
        "Disk Full",
        "disk",
        "# Disk Full\n\nThe disk of the database host is full. Check the ReplicaSet.\n",
        "h-disk",
    ),
]


def first_chunk(source: str, vector: list[float]) -> Document:
    return Document(content="...", embedding=vector, meta={"source": source, "chunk_index": 0})


@pytest.fixture(scope="module")
def bare() -> SentenceTransformer:
    return SentenceTransformer(resolve_model(MODEL), device="cpu")


def test_entries_describe_every_document(tmp_path):
    path = tmp_path / "kb.l0.json"
    chunks = [first_chunk("database/lag.md", [1.0, 0.0]), first_chunk("disk/full.md", [0.0, 1.0])]
    result = L0IndexWriter(index_path=str(path), model=MODEL).run(documents=DOCUMENTS[::-1], chunks=chunks)
    assert result == {"entries": 2, "path": str(path), "summaries_embedded": 0}

    index = load_l0_index(path)
    lag, disk = index.entries  # sorted by source
    assert (lag.source, lag.title, lag.category, lag.doc_hash) == (
        "database/lag.md",
        "PostgreSQL Replication Lag",
        "database",
        "h-lag",
    )
    assert lag.keywords == ["wal"] and lag.entities == [EntityRef("PostgreSQL", ["pg"])]
    assert lag.headings == ["PostgreSQL Replication Lag", "Diagnosis"]
    assert {"sql", "replication", "lag", "standby", "wal"} <= set(lag.terms) and lag.terms == sorted(lag.terms)
    assert index.term_df["disk"] == 1 and index.term_df["database"] == 2
    # "database" is named by both documents, only one of them inside the category.
    assert index.domain_precision == {"database": 0.5, "disk": 1.0}
    assert index.joined_words == {"postgresql", "replicaset"}
    assert index.model == MODEL


def test_summary_vectors_are_the_first_chunk_vectors(tmp_path):
    path = tmp_path / "kb.l0.json"
    chunks = [
        first_chunk("database/lag.md", [1.0, 0.0]),
        Document(content="...", embedding=[0.5, 0.5], meta={"source": "disk/full.md", "chunk_index": 1}),
        first_chunk("disk/full.md", [0.0, 1.0]),
    ]
    L0IndexWriter(index_path=str(path), model=MODEL).run(documents=DOCUMENTS, chunks=chunks)
    vectors = load_l0_index(path).summary_vectors
    assert vectors.dtype == np.float32 and vectors.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_unchanged_documents_keep_their_previous_vectors_and_changed_ones_are_embedded(tmp_path, bare):
    path = tmp_path / "kb.l0.json"
    previous = np.random.default_rng(7).random((2, 384), dtype=np.float32)
    writer = L0IndexWriter(index_path=str(path), model=MODEL)
    chunks = [first_chunk(d.meta["source"], list(v)) for d, v in zip(DOCUMENTS, previous, strict=True)]
    writer.run(documents=DOCUMENTS, chunks=chunks)

    changed = [DOCUMENTS[0], document(**{**DOCUMENTS[1].meta, "body": DOCUMENTS[1].content, "doc_hash": "h-new"})]
    result = writer.run(documents=changed)  # an incremental run that chunked nothing
    assert result["summaries_embedded"] == 1
    vectors = load_l0_index(path).summary_vectors
    assert np.array_equal(vectors[0], previous[0])
    expected = bare.encode(summary_text(changed[1]), normalize_embeddings=True)
    assert np.allclose(vectors[1], expected, atol=1e-5)


def test_vectors_of_another_model_are_not_reused(tmp_path):
    path = tmp_path / "kb.l0.json"
    L0IndexWriter(index_path=str(path)).run(
        documents=DOCUMENTS, chunks=[first_chunk(d.meta["source"], [1.0] * 384) for d in DOCUMENTS]
    )
    stale = load_l0_index(path)
    save_l0_index(L0Index(stale.entries, stale.summary_vectors, "another-model"), path)

    result = L0IndexWriter(index_path=str(path), model=MODEL).run(documents=DOCUMENTS)
    assert result["summaries_embedded"] == 2
    assert not np.allclose(load_l0_index(path).summary_vectors, 1.0)


def test_the_index_of_the_documents_is_the_saved_index_without_its_vectors(tmp_path):
    """What matching reads of an index, built in memory from the documents as the writer saves it."""
    path = tmp_path / "kb.l0.json"
    chunks = [first_chunk("database/lag.md", [1.0, 0.0]), first_chunk("disk/full.md", [0.0, 1.0])]
    L0IndexWriter(index_path=str(path), model=MODEL).run(documents=DOCUMENTS[::-1], chunks=chunks)
    saved, built = load_l0_index(path), l0_index_of(DOCUMENTS[::-1])
    assert built.entries == saved.entries
    assert (built.term_df, built.domain_precision, built.joined_words) == (
        saved.term_df,
        saved.domain_precision,
        saved.joined_words,
    )
    assert (built.summary_vectors, built.model) == (None, "")


def test_no_documents_gives_an_empty_index(tmp_path):
    path = tmp_path / "kb.l0.json"
    assert L0IndexWriter(index_path=str(path)).run(documents=[])["entries"] == 0
    index = load_l0_index(path)
    assert index.entries == [] and index.summary_vectors is None


def test_summary_text_is_the_title_and_the_start_of_the_first_section_with_text():
    body = "# Disk Full\n\n## Meaning\n" + "word " * 400
    text = summary_text(document("disk/full.md", "Disk Full", "disk", body))
    assert text.startswith("Disk Full\nword word") and len(text) == len("Disk Full\n") + SUMMARY_CHARS
    assert summary_text(document("x.md", "X", "general", "# X\n")) == "X\n"


def test_warm_up_is_idempotent():
    writer = L0IndexWriter(index_path="kb.l0.json", model=MODEL)
    writer.warm_up()
    loaded = writer._embedder._encoder  # the ONNX encoder of the default backend
    writer.warm_up()
    assert writer._embedder._encoder is loaded is not None


def test_round_trips():
    assert_round_trips(L0IndexWriter(index_path="/data/kb.l0.json", model=MODEL, device="cpu"))


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("index_path", "", "non-empty"),
    ("model", "", "non-empty"),
    ("device", "", "non-empty"),
    ("backend", "tf", "one of torch, onnx, onnx_int8"),
    ("onnx_cache_dir", "", "non-empty"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(
        lambda **changed: L0IndexWriter(**{**{"index_path": "kb.l0.json"}, **changed}), parameter, value, rule
    )
