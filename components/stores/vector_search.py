"""
The two vector-store paths behind one result shape.

- `sdk`: pymilvus `MilvusClient.search`, raw score = L2 squared distance.
- `haystack`: milvus-haystack `MilvusEmbeddingRetriever` over `MilvusDocumentStore` attached to
  the same collection, raw score = milvus-haystack's `1 - d/4`.

Both return `Candidate`s with the same normalized similarity (see `components.common.scoring`).
"""

import logging
from typing import Any, Protocol

import numpy as np

from components.common.scoring import (
    HAYSTACK_SCORE_LABEL,
    SDK_SCORE_LABEL,
    similarity_from_haystack_score,
    similarity_from_l2,
)
from components.contracts import Candidate
from components.stores.milvus_collection import (
    CATEGORY_FIELD,
    CONTENT_FIELD,
    ID_FIELD,
    METADATA_FIELD,
    VECTOR_FIELD,
    category_filter,
    connect,
    connection_args,
    ensure_loaded,
    index_params_for,
)

logger = logging.getLogger(__name__)

PATHS = ("sdk", "haystack")

# Query embeddings as components receive them: the query embedder's float32 array (one row per
# query variant), or plain nested lists when a component is called directly.
QueryEmbeddings = np.ndarray | list[list[float]]


def as_float_list(vector: Any) -> list[float]:
    """A vector as the plain list of floats that pymilvus and milvus-haystack take."""
    return vector.tolist() if isinstance(vector, np.ndarray) else [float(x) for x in vector]


class VectorSearch(Protocol):
    path: str

    def search(self, embedding: list[float], top_k: int, category: str | None) -> list[Candidate]: ...

    def describe_filter(self, category: str | None) -> str | None: ...


def _candidate(
    key: str,
    content: str,
    metadata: dict[str, Any],
    category: str | None,
    raw: float,
    label: str,
    sim: float,
    path: str,
) -> Candidate:
    return Candidate(
        evidence_key=metadata.get("evidence_key") or key,
        source=metadata.get("source") or "",
        content=content or "",
        similarity=round(sim, 6),
        raw_score=round(float(raw), 6),
        raw_score_label=label,
        path=path,
        title=metadata.get("title"),
        breadcrumb=metadata.get("breadcrumb"),
        category=category if category is not None else metadata.get("category"),
        chunk_index=int(metadata.get("chunk_index") or 0),
        section_kind=metadata.get("section_kind"),
        keywords=list(metadata.get("keywords") or []),
        entities=[e["name"] if isinstance(e, dict) else str(e) for e in metadata.get("entities") or []],
        terms=frozenset(metadata.get("terms") or ()),
        tokens=metadata.get("tokens"),
    )


class SdkVectorSearch:
    """pymilvus `MilvusClient.search` on the `category` column filter."""

    path = "sdk"

    def __init__(self, uri: str, collection: str, search_params: dict | None = None) -> None:
        self.uri = uri
        self.collection = collection
        self.search_params = dict(search_params or {})
        self._client = None

    def _ready_client(self):
        if self._client is None:
            client = connect(self.uri)
            if not client.has_collection(self.collection):
                raise LookupError(f"collection {self.collection} does not exist at {self.uri}: run `knowledge index`")
            ensure_loaded(client, self.collection)
            self._client = client
        return self._client

    def describe_filter(self, category: str | None) -> str | None:
        return category_filter(category) if category is not None else None

    def search(self, embedding: list[float], top_k: int, category: str | None) -> list[Candidate]:
        client = self._ready_client()
        hits = client.search(
            self.collection,
            data=[as_float_list(embedding)],
            limit=top_k,
            filter=self.describe_filter(category) or "",
            output_fields=[CONTENT_FIELD, METADATA_FIELD, CATEGORY_FIELD],
            search_params={"metric_type": "L2", "params": self.search_params},
            anns_field=VECTOR_FIELD,
        )[0]
        candidates = []
        for hit in hits:
            entity = hit.get("entity", hit)
            distance = float(hit["distance"])
            candidates.append(
                _candidate(
                    str(hit.get(ID_FIELD, hit.get("id"))),
                    entity.get(CONTENT_FIELD),
                    entity.get(METADATA_FIELD) or {},
                    entity.get(CATEGORY_FIELD),
                    distance,
                    SDK_SCORE_LABEL,
                    similarity_from_l2(distance),
                    self.path,
                )
            )
        return candidates


class HaystackVectorSearch:
    """milvus-haystack `MilvusEmbeddingRetriever` over the same collection and field names."""

    path = "haystack"

    def __init__(self, uri: str, collection: str, index_type: str = "FLAT", search_params: dict | None = None) -> None:
        self.uri = uri
        self.collection = collection
        self.index_type = index_type
        self.search_params = dict(search_params or {})
        self._retriever = None

    def _ready_retriever(self):
        if self._retriever is None:
            from milvus_haystack import MilvusDocumentStore, MilvusEmbeddingRetriever

            # The collection exists already; checking first keeps milvus-haystack from creating
            # one with its own default schema.
            client = connect(self.uri)
            if not client.has_collection(self.collection):
                raise LookupError(f"collection {self.collection} does not exist at {self.uri}: run `knowledge index`")
            ensure_loaded(client, self.collection)
            store = MilvusDocumentStore(
                connection_args=connection_args(self.uri),
                collection_name=self.collection,
                primary_field=ID_FIELD,
                text_field=CONTENT_FIELD,
                vector_field=VECTOR_FIELD,
                enable_dynamic_field=False,
                # Explicit, so Document.score follows the real L2 metric (1 - d/4).
                index_params=index_params_for(self.index_type),
                search_params={"metric_type": "L2", "params": self.search_params},
            )
            self._retriever = MilvusEmbeddingRetriever(document_store=store)
        return self._retriever

    def describe_filter(self, category: str | None) -> str | None:
        return None if category is None else category_filter(category)

    def search(self, embedding: list[float], top_k: int, category: str | None) -> list[Candidate]:
        retriever = self._ready_retriever()
        filters = None if category is None else {"field": CATEGORY_FIELD, "operator": "==", "value": category}
        documents = retriever.run(query_embedding=as_float_list(embedding), filters=filters, top_k=top_k)["documents"]
        candidates = []
        for document in documents:
            meta = document.meta or {}
            metadata = meta.get(METADATA_FIELD) or {}
            candidates.append(
                _candidate(
                    str(document.id),
                    document.content,
                    metadata,
                    meta.get(CATEGORY_FIELD),
                    float(document.score),
                    HAYSTACK_SCORE_LABEL,
                    similarity_from_haystack_score(float(document.score)),
                    self.path,
                )
            )
        return candidates


def make_search(path: str, uri: str, collection: str, index_type: str, search_params: dict | None) -> VectorSearch:
    if path == "sdk":
        return SdkVectorSearch(uri, collection, search_params)
    if path == "haystack":
        return HaystackVectorSearch(uri, collection, index_type, search_params)
    raise ValueError(f"unknown vector store path {path!r}; one of {', '.join(PATHS)}")
