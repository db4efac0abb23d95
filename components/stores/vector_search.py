"""
The two vector-store paths behind one result shape.

- `sdk`: pymilvus `MilvusClient.search`, raw score = what Milvus returns for the collection's
  metric (L2 squared distance, or the IP / COSINE score).
- `haystack`: milvus-haystack `MilvusEmbeddingRetriever` over `MilvusDocumentStore` attached to
  the same collection, raw score = milvus-haystack's own (`1 - d/4` for L2).

Both return `Candidate`s with the same normalized similarity (see `components.common.scoring`).
Each reads the collection's layout (`describe_layout`) when it opens it and never alters it.

On a collection with the BM25 `sparse` field, both also run the full-text leg (`bm25_search`:
the SDK's search on `sparse` with the raw query text, or milvus-haystack's
`MilvusSparseEmbeddingRetriever` with its `BM25BuiltInFunction`). Its hits come back with their
stored dense vectors, so a chunk only the BM25 leg found gets the same raw score and similarity a
dense search would give it (`sdk_raw_score`, `haystack_raw_score`), without a second search.
"""

import threading
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from components.common.scoring import (
    bm25_score,
    haystack_raw_score,
    haystack_score_label,
    sdk_raw_score,
    sdk_score_label,
    similarity_from_haystack,
    similarity_from_sdk,
)
from components.contracts import Candidate
from components.stores.milvus_collection import (
    BM25_FUNCTION,
    BM25_METRIC,
    CATEGORY_FIELD,
    CONTENT_FIELD,
    ID_FIELD,
    METADATA_FIELD,
    SPARSE_FIELD,
    VECTOR_FIELD,
    CollectionLayout,
    category_filter,
    check_dimension,
    close_quietly,
    index_params_for,
)
from components.stores.milvus_deadline import within
from components.stores.store_access import StoreAccess

PATHS = ("sdk", "haystack")

# A query embedding as components receive it: the query embedder's float32 array, or a plain
# list of floats when a component is called directly.
Embedding = np.ndarray | list[float]


def as_float_list(vector: Any) -> list[float]:
    """A vector as the plain list of floats that pymilvus and milvus-haystack take."""
    return vector.tolist() if isinstance(vector, np.ndarray) else [float(x) for x in vector]


class UnsupportedFilterError(LookupError):
    """This path cannot express the filter on this collection (another path can)."""


NO_SPARSE_FIELD = f"collection has no {SPARSE_FIELD} field; run knowledge index --rebuild"


class NoFullTextError(LookupError):
    """The collection has no BM25 `sparse` field (built before it existed, or on a Milvus without BM25)."""


@dataclass(frozen=True)
class Bm25Hit:
    """
    One chunk of the BM25 leg: Milvus's BM25 score, its 1-based rank, and the chunk as a dense
    candidate (raw score and similarity computed from its stored vector).
    """

    candidate: Candidate
    score: float
    rank: int

    @property
    def key(self) -> str:
        return self.candidate.evidence_key


def bm25_hits(candidates_and_raw: list[tuple[Candidate, float]]) -> list[Bm25Hit]:
    return [
        Bm25Hit(candidate, round(bm25_score(raw), 6), rank)
        for rank, (candidate, raw) in enumerate(candidates_and_raw, start=1)
    ]


class VectorSearch(Protocol):
    path: str

    @property
    def described_index_type(self) -> str | None: ...

    @property
    def layout(self) -> CollectionLayout: ...

    @property
    def known_layout(self) -> CollectionLayout | None: ...

    def search(self, embedding: list[float], top_k: int, category: str | None) -> list[Candidate]: ...

    def top_similarity(self, embedding: list[float], category: str | None) -> float: ...

    def bm25_search(self, text: str, embedding: list[float], top_k: int, category: str | None) -> list[Bm25Hit]: ...

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


class _OpenedCollection:
    """What a path knows of its collection (`_layout`) from when it last opened it (None before), without opening it."""

    @property
    def known_layout(self) -> CollectionLayout | None:
        return self._layout

    @property
    def described_index_type(self) -> str | None:
        """The collection's vector index as Milvus describes it (None before the first search)."""
        return self._layout.index_type if self._layout is not None else None


class SdkVectorSearch(_OpenedCollection):
    """
    pymilvus `MilvusClient.search`, filtered on the `category` column, or on `metadata["category"]`
    in a collection without that column.
    """

    path = "sdk"

    def __init__(self, store: StoreAccess) -> None:
        self.store = store
        self.collection = store.collection
        self._client = None
        self._layout: CollectionLayout | None = None
        self._opening = threading.Lock()  # a lookup's legs run side by side: one of them opens the client

    def _ready_client(self):
        with self._opening:
            if self._client is None:
                self._client, self._layout = self.store.open_collection()
            return self._client

    @property
    def layout(self) -> CollectionLayout:
        self._ready_client()
        return self._layout

    def describe_filter(self, category: str | None) -> str | None:
        if category is None:
            return None
        has_column = self._layout.has_category if self._layout is not None else True
        return category_filter(category, has_column)

    def _reconnect_next_time(self, failed) -> None:
        """Drop the client a call failed on (not a newer one another lookup opened meanwhile)."""
        if self._client is failed:
            self._client = None
        close_quietly(failed)

    def search(self, embedding: list[float], top_k: int, category: str | None) -> list[Candidate]:
        return within(self.store.uri, self.store.timeout_ms, lambda: self._filtered_dense(embedding, top_k, category))

    def _filtered_dense(self, embedding: list[float], top_k: int, category: str | None) -> list[Candidate]:
        self._ready_client()  # the filter depends on the layout
        return self._dense(embedding, top_k, self.describe_filter(category) or "")

    def top_similarity(self, embedding: list[float], category: str | None) -> float:
        """The best dense similarity of the query in this scope (one hit, no fields fetched)."""
        return within(self.store.uri, self.store.timeout_ms, lambda: self._top_similarity(embedding, category))

    def _top_similarity(self, embedding: list[float], category: str | None) -> float:
        hits = self._search_vector(embedding, 1, self.describe_filter(category) or "", [ID_FIELD])
        return max((similarity_from_sdk(float(hit["distance"]), self.layout.metric) for hit in hits), default=0.0)

    def bm25_search(self, text: str, embedding: list[float], top_k: int, category: str | None) -> list[Bm25Hit]:
        return within(self.store.uri, self.store.timeout_ms, lambda: self._bm25(text, embedding, top_k, category))

    def _bm25(self, text: str, embedding: list[float], top_k: int, category: str | None) -> list[Bm25Hit]:
        layout = self.layout
        if not layout.has_sparse:
            raise NoFullTextError(NO_SPARSE_FIELD)
        query = np.asarray(embedding, dtype=np.float32)  # once, for every hit's local score
        check_dimension(layout, self.collection, len(query))
        hits = self.search_text(text, top_k, self.describe_filter(category) or "", self._fields() + [VECTOR_FIELD])
        scored = []
        for hit in hits:
            raw = sdk_raw_score(query, hit.get("entity", hit)[VECTOR_FIELD], layout.metric)
            scored.append((self._hit_candidate(hit, raw), hit["distance"]))
        return bm25_hits(scored)

    def _fields(self) -> list[str]:
        return [CONTENT_FIELD, METADATA_FIELD] + ([CATEGORY_FIELD] if self.layout.has_category else [])

    def _search_vector(self, embedding: list[float], limit: int, expression: str, fields: list[str]) -> list[dict]:
        vector = as_float_list(embedding)
        layout = self.layout
        check_dimension(layout, self.collection, len(vector))
        search_params = {"metric_type": layout.metric, "params": dict(self.store.search_params)}
        return self._call(
            "search", self.collection, data=[vector], limit=limit, filter=expression, output_fields=fields,
            search_params=search_params, anns_field=VECTOR_FIELD, timeout=self.store.timeout_s,
        )[0]  # fmt: skip

    def search_text(self, text: str, limit: int, expression: str, fields: list[str]) -> list[dict]:
        """The raw BM25 hits of `text` (best first) with `fields`."""
        return self._call(
            "search", self.collection, data=[text], limit=limit, filter=expression, output_fields=fields,
            search_params={"metric_type": BM25_METRIC}, anns_field=SPARSE_FIELD, timeout=self.store.timeout_s,
        )[0]  # fmt: skip

    def fetch(self, keys: list[str], fields: list[str]) -> list[dict]:
        """The rows of `keys` with `fields`."""
        return self._call("get", self.collection, ids=keys, output_fields=fields)

    def _call(self, method: str, *args, **kwargs):
        """
        One call of the client. On a failure the server may be down or restarted: the next call
        opens a new client, so lookups succeed again once it is back, without restarting the process.
        """
        client = self._ready_client()
        try:
            return getattr(client, method)(*args, **kwargs)
        except Exception:
            self._reconnect_next_time(client)
            raise

    def _dense(self, embedding: list[float], limit: int, expression: str) -> list[Candidate]:
        self._ready_client()
        hits = self._search_vector(embedding, limit, expression, self._fields())
        return [self._hit_candidate(hit, float(hit["distance"])) for hit in hits]

    def _hit_candidate(self, hit: dict, raw: float) -> Candidate:
        entity = hit.get("entity", hit)
        metric = self.layout.metric
        return _candidate(
            str(hit.get(ID_FIELD, hit.get("id"))),
            entity.get(CONTENT_FIELD),
            entity.get(METADATA_FIELD) or {},
            entity.get(CATEGORY_FIELD),
            raw,
            sdk_score_label(metric),
            similarity_from_sdk(raw, metric),
            self.path,
        )


class HaystackVectorSearch(_OpenedCollection):
    """milvus-haystack `MilvusEmbeddingRetriever` over the same collection and field names."""

    path = "haystack"

    def __init__(self, store: StoreAccess) -> None:
        self.store = store
        self.collection = store.collection
        self._retriever = None
        self._sparse_retriever = None
        self._layout: CollectionLayout | None = None
        self._opening = threading.Lock()  # a lookup's legs run side by side: one of them opens the store

    @property
    def layout(self) -> CollectionLayout:
        self._ready_retriever()
        return self._layout

    def _ready_retriever(self):
        with self._opening:
            if self._retriever is None:
                import milvus_haystack

                # The collection exists already; checking first keeps milvus-haystack from creating
                # one with its own default schema.
                probe, layout = self.store.open_collection()
                close_quietly(probe)  # the document store opens its own client
                document_store = milvus_haystack.MilvusDocumentStore(
                    connection_args=self.store.connection_args(),
                    collection_name=self.collection,
                    primary_field=ID_FIELD,
                    text_field=CONTENT_FIELD,
                    vector_field=VECTOR_FIELD,
                    enable_dynamic_field=False,
                    # Explicit and read from the collection, so Document.score follows its real metric.
                    index_params=index_params_for(layout.index_type, metric=layout.metric),
                    search_params={"metric_type": layout.metric, "params": dict(self.store.search_params)},
                    timeout=self.store.timeout_s,
                    **_full_text_arguments(layout),
                )
                self._retriever = milvus_haystack.MilvusEmbeddingRetriever(document_store=document_store)
                if layout.has_sparse:
                    self._sparse_retriever = milvus_haystack.MilvusSparseEmbeddingRetriever(
                        document_store=document_store
                    )
                self._layout = layout
            return self._retriever

    def retrievers(self) -> tuple[Any, Any]:
        """milvus-haystack's dense and BM25 retrievers on the collection (the BM25 one None without `sparse`)."""
        return self._ready_retriever(), self._sparse_retriever

    def _reconnect_next_time(self, failed) -> None:
        """Drop the retriever a call failed on (not a newer one another lookup opened meanwhile)."""
        if self._retriever is failed or self._sparse_retriever is failed:
            self._retriever, self._sparse_retriever = None, None
        client = getattr(getattr(failed, "document_store", None), "client", None)
        if client is not None:
            close_quietly(client)

    def describe_filter(self, category: str | None) -> str | None:
        if category is None:
            return None
        if self._layout is not None and not self._layout.has_category:
            return None  # unsupported on this path: see `search`
        return category_filter(category)

    def search(self, embedding: list[float], top_k: int, category: str | None) -> list[Candidate]:
        return within(self.store.uri, self.store.timeout_ms, lambda: self._search(embedding, top_k, category))

    def _search(self, embedding: list[float], top_k: int, category: str | None) -> list[Candidate]:
        self._ready_retriever()
        layout = self._layout
        vector = as_float_list(embedding)
        check_dimension(layout, self.collection, len(vector))
        if category is not None and not layout.has_category:
            # milvus-haystack filters cannot address a key inside the JSON column.
            raise UnsupportedFilterError(
                f"collection {self.collection} has no {CATEGORY_FIELD} column and milvus-haystack cannot filter "
                f"on {METADATA_FIELD}[{CATEGORY_FIELD!r}]"
            )
        filters = None if category is None else {"field": CATEGORY_FIELD, "operator": "==", "value": category}
        return self._dense(vector, top_k, filters)

    def top_similarity(self, embedding: list[float], category: str | None) -> float:
        """The best dense similarity of the query in this scope (one hit)."""
        return max((candidate.similarity for candidate in self.search(embedding, 1, category)), default=0.0)

    def bm25_search(self, text: str, embedding: list[float], top_k: int, category: str | None) -> list[Bm25Hit]:
        return within(self.store.uri, self.store.timeout_ms, lambda: self._bm25(text, embedding, top_k, category))

    def _bm25(self, text: str, embedding: list[float], top_k: int, category: str | None) -> list[Bm25Hit]:
        self._ready_retriever()
        sparse = self._sparse_retriever
        if sparse is None:
            raise NoFullTextError(NO_SPARSE_FIELD)
        query = np.asarray(embedding, dtype=np.float32)  # once, for every document's local score
        check_dimension(self._layout, self.collection, len(query))
        filters = None if category is None else {"field": CATEGORY_FIELD, "operator": "==", "value": category}
        try:
            documents = sparse.run(query_text=text, filters=filters, top_k=top_k)["documents"]
        except Exception:
            self._reconnect_next_time(sparse)
            raise
        metric = self._layout.metric
        # milvus-haystack returns each document with its stored dense embedding.
        scored = [
            (self._document_candidate(document, haystack_raw_score(query, document.embedding, metric)), document.score)
            for document in documents
        ]
        return bm25_hits(scored)

    def _dense(self, vector: list[float], limit: int, filters: dict | None) -> list[Candidate]:
        retriever = self._retriever
        try:
            documents = retriever.run(query_embedding=vector, filters=filters, top_k=limit)["documents"]
        except Exception:
            # As on the sdk path: a new document store (and connection) on the next search.
            self._reconnect_next_time(retriever)
            raise
        return [self._document_candidate(document, float(document.score)) for document in documents]

    def _document_candidate(self, document, raw: float) -> Candidate:
        meta = document.meta or {}
        metric = self._layout.metric
        return _candidate(
            str(document.id),
            document.content,
            meta.get(METADATA_FIELD) or {},
            meta.get(CATEGORY_FIELD),
            raw,
            haystack_score_label(metric),
            similarity_from_haystack(raw, metric),
            self.path,
        )


def _full_text_arguments(layout: CollectionLayout) -> dict[str, Any]:
    """milvus-haystack's arguments for the collection's BM25 field (none without one)."""
    if not layout.has_sparse:
        return {}
    from milvus_haystack.function import BM25BuiltInFunction

    function = BM25BuiltInFunction(
        input_field_names=CONTENT_FIELD, output_field_names=SPARSE_FIELD, function_name=BM25_FUNCTION
    )
    return {"sparse_vector_field": SPARSE_FIELD, "builtin_function": [function]}


def make_search(path: str, store: StoreAccess) -> VectorSearch:
    """The search of `store`'s collection on one path (`KnowledgeStore.vector_search`)."""
    if path == "sdk":
        return SdkVectorSearch(store)
    if path == "haystack":
        return HaystackVectorSearch(store)
    raise ValueError(f"unknown vector store path {path!r}; one of {', '.join(PATHS)}")
