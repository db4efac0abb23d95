"""
Small embedded chunks (4-d vectors) and collections of another schema, for the unit tests of the
Milvus writer, the index planner, the vector searches and the sidecar.
"""

import math

from haystack import Document
from pymilvus import DataType, MilvusClient

from components.stores.milvus_collection import connect

DIM = 4


def unit(*values: float) -> list[float]:
    """A unit-length vector (the collection holds normalized embeddings)."""
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


def chunk(source: str, index: int, vector: list[float], category: str = "ops", **meta) -> Document:
    """A chunk as the chunker and embedder leave it, with what the writer stores."""
    key = f"{source}#{index}"
    return Document(
        id=key,
        content=meta.pop("content", f"chunk {index} of {source}"),
        embedding=unit(*vector),
        meta={
            "source": source,
            "title": f"Title of {source}",
            "breadcrumb": f"Title of {source} > Part {index}",
            "category": category,
            "chunk_index": index,
            "evidence_key": key,
            "doc_hash": meta.pop("doc_hash", f"hash of {source}"),
            "terms": ["chunk", source],
            "tokens": 4,
            **meta,
        },
    )


def short_field_collection(uri: str, name: str, category_chars: int | None) -> None:
    """An existing collection of another schema: a short category column, or none."""
    client = connect(uri)
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("content", DataType.VARCHAR, max_length=200)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("metadata", DataType.JSON)
    if category_chars is not None:
        schema.add_field("category", DataType.VARCHAR, max_length=category_chars)
    params = client.prepare_index_params()
    params.add_index("vector", index_type="FLAT", metric_type="L2")
    client.create_collection(name, schema=schema, index_params=params)
