"""The Milvus collection created by indexing the sample knowledge base: schema, index, rows."""

import hashlib

import numpy as np
import pytest
from pymilvus import DataType

from components.indexing.markdown_chunker import MarkdownChunker
from components.indexing.markdown_reader import MarkdownKnowledgeReader
from components.stores.milvus_collection import _is_lock_error, connect, ensure_loaded
from components.stores.milvus_errors import exception_chain
from tests.conftest import SAMPLE_KB
from tests.helpers import MODEL, collection_rows

METADATA_KEYS = {"source", "title", "breadcrumb", "category", "chunk_index", "evidence_key", "content_hash"}


@pytest.fixture(scope="module")
def client(sample_cfg):
    client = connect(sample_cfg.milvus.uri)
    ensure_loaded(client, sample_cfg.milvus.collection)
    return client


@pytest.fixture(scope="module")
def rows(sample_cfg):
    return collection_rows(sample_cfg)


def test_fields(client, sample_cfg):
    description = client.describe_collection(sample_cfg.milvus.collection)
    fields = {field["name"]: field for field in description["fields"]}
    assert sample_cfg.milvus.full_text is True
    assert list(fields) == ["id", "content", "vector", "metadata", "category", "sparse"]
    assert fields["id"]["type"] == DataType.VARCHAR and fields["id"].get("is_primary") is True
    assert not any(f.get("is_primary") for name, f in fields.items() if name != "id")
    assert fields["content"]["type"] == DataType.VARCHAR
    assert fields["vector"]["type"] == DataType.FLOAT_VECTOR
    assert int(fields["vector"]["params"]["dim"]) == 384
    assert fields["metadata"]["type"] == DataType.JSON
    assert fields["category"]["type"] == DataType.VARCHAR
    # The BM25 full-text field: Milvus computes it from the analysed content.
    assert fields["sparse"]["type"] == DataType.SPARSE_FLOAT_VECTOR and fields["sparse"].get("is_function_output")
    assert str(fields["content"]["params"].get("enable_analyzer")).lower() == "true"
    (function,) = description["functions"]
    assert (function["input_field_names"], function["output_field_names"]) == (["content"], ["sparse"])
    assert description["auto_id"] is False
    assert description["enable_dynamic_field"] is False


def test_vector_index_uses_l2(client, sample_cfg):
    name = sample_cfg.milvus.collection
    (index_name,) = client.list_indexes(name, field_name="vector")
    index = client.describe_index(name, index_name)
    assert index["field_name"] == "vector"
    assert index["metric_type"] == "L2"
    assert index["index_type"] == sample_cfg.milvus.index_type == "FLAT"
    (sparse_index,) = client.list_indexes(name, field_name="sparse")
    sparse = client.describe_index(name, sparse_index)
    assert (sparse["index_type"], sparse["metric_type"]) == ("SPARSE_INVERTED_INDEX", "BM25")


def test_rows_are_the_chunks_of_the_sample_kb(rows):
    documents = MarkdownKnowledgeReader(kb_path=str(SAMPLE_KB)).run()["documents"]
    chunks = MarkdownChunker(tokenizer_model=MODEL).run(documents=documents)["documents"]
    assert sorted(row["id"] for row in rows) == sorted(chunk.id for chunk in chunks)
    contents = {chunk.id: chunk.content for chunk in chunks}
    assert all(row["content"] == contents[row["id"]] for row in rows)


def test_metadata_of_every_row(rows):
    sources = {path.relative_to(SAMPLE_KB).as_posix() for path in SAMPLE_KB.rglob("*.md")}
    indexes_by_source: dict[str, list[int]] = {}
    for row in rows:
        meta = row["metadata"]
        assert set(meta) >= METADATA_KEYS, row["id"]
        assert meta["evidence_key"] == row["id"]
        assert meta["source"] in sources
        assert meta["category"] == row["category"] == meta["source"].split("/")[0]
        assert meta["content_hash"] == hashlib.sha256(row["content"].encode("utf-8")).hexdigest()[:16]
        assert meta["title"] and meta["breadcrumb"]
        indexes_by_source.setdefault(meta["source"], []).append(meta["chunk_index"])
    assert set(indexes_by_source) == sources
    for source, indexes in indexes_by_source.items():
        assert sorted(indexes) == list(range(len(indexes))), source


def test_metadata_keeps_frontmatter_fields(rows):
    replication = [r["metadata"] for r in rows if r["metadata"]["source"] == "database/postgresql-replication-lag.md"]
    assert replication
    meta = replication[0]
    assert meta["title"] == "PostgreSQL Replication Lag"
    assert "replication lag" in meta["keywords"]
    assert {"name": "PostgreSQL", "aliases": ["postgres", "pg", "psql"]} in meta["entities"]
    assert meta["has_frontmatter"] is True


def test_vectors_are_unit_length(client, sample_cfg, rows):
    some_ids = sorted(row["id"] for row in rows)[:20]
    stored = client.get(sample_cfg.milvus.collection, ids=some_ids, output_fields=["vector"])
    vectors = np.asarray([row["vector"] for row in stored], dtype=np.float32)
    assert vectors.shape == (20, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)


def test_category_column_filters(client, sample_cfg, rows):
    name = sample_cfg.milvus.collection
    expected = sum(1 for row in rows if row["category"] == "queues")
    found = client.query(name, filter='category == "queues"', output_fields=["count(*)"])
    assert expected > 0 and found[0]["count(*)"] == expected


def self_caused_error() -> Exception:
    error = RuntimeError("failed to connect to all addresses")
    error.__cause__ = error
    return error


def test_exception_chain_visits_each_error_once_even_in_a_cycle():
    first = self_caused_error()
    outer = ValueError("outer")
    outer.__cause__ = first
    assert list(exception_chain(outer)) == [outer, first]
    assert list(exception_chain(None)) == []


def test_lock_probe_ends_on_an_error_that_is_its_own_cause():
    assert _is_lock_error(self_caused_error()) is False
