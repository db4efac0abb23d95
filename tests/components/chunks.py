"""Small embedded chunks for the unit tests of the Milvus writer, planner and vector searches (4-d vectors)."""

import math

from haystack import Document

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
