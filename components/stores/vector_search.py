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
`MilvusSparseEmbeddingRetriever` with its `BM25BuiltInFunction`) and a dense search restricted to
given chunk ids (`search_ids`: the similarity of a chunk only the BM25 leg found).
"""

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from components.common.scoring import (
    bm25_score,
    haystack_score_label,
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
    connect,
    connection_args,
    describe_layout,
    ensure_loaded,
    index_params_for,
    quote_string,
    timeout_seconds,
)

PATHS = ("sdk", "haystack")

# Query embeddings as components receive them: the query embedder's float32 array (one row per
# query variant), or plain nested lists when a component is called directly.
QueryEmbeddings = np.ndarray | list[list[float]]


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
    """One chunk of the BM25 leg: its id (the evidence key), Milvus's BM25 score, its 1-based rank."""

    key: str
    score: float
    rank: int


def bm25_hits(keys_and_raw: list[tuple[str, float]]) -> list[Bm25Hit]:
    return [Bm25Hit(key, round(bm25_score(raw), 6), rank) for rank, (key, raw) in enumerate(keys_and_raw, start=1)]


def ids_filter(keys: list[str]) -> str:
    return f"{ID_FIELD} in [{', '.join(quote_string(key) for key in keys)}]"


def _open_collection(uri: str, collection: str, timeout_ms: int | None, auth: dict | None = None):
    """A client on an existing, loaded collection and its layout; never creates or alters it."""
    client = connect(uri, timeout_ms, auth)
    if not client.has_collection(collection):
        raise LookupError(f"collection {collection} does not exist at {uri}: run `knowledge index`")
    layout = describe_layout(client, collection)
    ensure_loaded(client, collection)
    return client, layout


class VectorSearch(Protocol):
    path: str

    @property
    def described_index_type(self) -> str | None: ...

    @property
    def layout(self) -> CollectionLayout: ...

    def search(self, embedding: list[float], top_k: int, category: str | None) -> list[Candidate]: ...

    def search_ids(self, embedding: list[float], keys: list[str]) -> list[Candidate]: ...

    def bm25_search(self, text: str, top_k: int, category: str | None) -> list[Bm25Hit]: ...

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
    """
    pymilvus `MilvusClient.search`, filtered on the `category` column, or on `metadata["category"]`
    in a collection without that column.
    """

    path = "sdk"

    def __init__(
        self,
        uri: str,
        collection: str,
        search_params: dict | None = None,
        timeout_ms: int | None = None,
        auth: dict | None = None,
    ) -> None:
        self.uri = uri
        self.collection = collection
        self.search_params = dict(search_params or {})
        self.timeout_ms = timeout_ms
        self._auth = dict(auth or {})  # resolved credentials (`MilvusAuth.connect_args()`): never logged
        self._client = None
        self._layout: CollectionLayout | None = None

    def _ready_client(self):
        if self._client is None:
            self._client, self._layout = _open_collection(self.uri, self.collection, self.timeout_ms, self._auth)
        return self._client

    @property
    def layout(self) -> CollectionLayout:
        self._ready_client()
        return self._layout

    @property
    def described_index_type(self) -> str | None:
        """The collection's vector index as Milvus describes it (None before the first search)."""
        return self._layout.index_type if self._layout is not None else None

    def describe_filter(self, category: str | None) -> str | None:
        if category is None:
            return None
        has_column = self._layout.has_category if self._layout is not None else True
        return category_filter(category, has_column)

    def _reconnect_next_time(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            close_quietly(client)

    def search(self, embedding: list[float], top_k: int, category: str | None) -> list[Candidate]:
        self._ready_client()  # the filter depends on the layout
        return self._dense(embedding, top_k, self.describe_filter(category) or "")

    def search_ids(self, embedding: list[float], keys: list[str]) -> list[Candidate]:
        """The dense candidates of exactly these chunk ids (their similarity to the query)."""
        return self._dense(embedding, len(keys), ids_filter(keys)) if keys else []

    def bm25_search(self, text: str, top_k: int, category: str | None) -> list[Bm25Hit]:
        client = self._ready_client()
        if not self.layout.has_sparse:
            raise NoFullTextError(NO_SPARSE_FIELD)
        try:
            hits = client.search(
                self.collection,
                data=[text],
                limit=top_k,
                filter=self.describe_filter(category) or "",
                output_fields=[ID_FIELD],  # none would return every field, vectors included
                search_params={"metric_type": BM25_METRIC},
                anns_field=SPARSE_FIELD,
                timeout=timeout_seconds(self.timeout_ms),
            )[0]
        except Exception:
            self._reconnect_next_time()
            raise
        return bm25_hits([(str(hit.get(ID_FIELD, hit.get("id"))), hit["distance"]) for hit in hits])

    def _dense(self, embedding: list[float], limit: int, expression: str) -> list[Candidate]:
        client = self._ready_client()
        vector = as_float_list(embedding)
        layout = self.layout
        check_dimension(layout, self.collection, len(vector))
        fields = [CONTENT_FIELD, METADATA_FIELD] + ([CATEGORY_FIELD] if layout.has_category else [])
        try:
            hits = client.search(
                self.collection,
                data=[vector],
                limit=limit,
                filter=expression,
                output_fields=fields,
                search_params={"metric_type": layout.metric, "params": self.search_params},
                anns_field=VECTOR_FIELD,
                timeout=timeout_seconds(self.timeout_ms),
            )[0]
        except Exception:
            # The server may be down or restarted: the next search opens a new client, so lookups
            # succeed again once it is back, without restarting the process.
            self._reconnect_next_time()
            raise
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
                    sdk_score_label(layout.metric),
                    similarity_from_sdk(distance, layout.metric),
                    self.path,
                )
            )
        return candidates


class HaystackVectorSearch:
    """milvus-haystack `MilvusEmbeddingRetriever` over the same collection and field names."""

    path = "haystack"

    def __init__(
        self,
        uri: str,
        collection: str,
        index_type: str = "FLAT",
        search_params: dict | None = None,
        timeout_ms: int | None = None,
        auth: dict | None = None,
    ) -> None:
        self.uri = uri
        self.collection = collection
        self.index_type = index_type
        self.search_params = dict(search_params or {})
        self.timeout_ms = timeout_ms
        self._auth = dict(auth or {})  # resolved credentials (`MilvusAuth.connect_args()`): never logged
        self._retriever = None
        self._sparse_retriever = None
        self._layout: CollectionLayout | None = None

    @property
    def layout(self) -> CollectionLayout:
        self._ready_retriever()
        return self._layout

    def _ready_retriever(self):
        if self._retriever is None:
            from milvus_haystack import MilvusDocumentStore, MilvusEmbeddingRetriever, MilvusSparseEmbeddingRetriever

            # The collection exists already; checking first keeps milvus-haystack from creating
            # one with its own default schema.
            probe, layout = _open_collection(self.uri, self.collection, self.timeout_ms, self._auth)
            close_quietly(probe)  # the document store opens its own client
            store = MilvusDocumentStore(
                connection_args=connection_args(self.uri, self.timeout_ms, self._auth),
                collection_name=self.collection,
                primary_field=ID_FIELD,
                text_field=CONTENT_FIELD,
                vector_field=VECTOR_FIELD,
                enable_dynamic_field=False,
                # Explicit and read from the collection, so Document.score follows its real metric.
                index_params=index_params_for(layout.index_type, metric=layout.metric),
                search_params={"metric_type": layout.metric, "params": self.search_params},
                timeout=timeout_seconds(self.timeout_ms),
                **_full_text_arguments(layout),
            )
            self._retriever = MilvusEmbeddingRetriever(document_store=store)
            if layout.has_sparse:
                self._sparse_retriever = MilvusSparseEmbeddingRetriever(document_store=store)
            self._layout = layout
        return self._retriever

    @property
    def described_index_type(self) -> str | None:
        """The collection's vector index as Milvus describes it (None before the first search)."""
        return self._layout.index_type if self._layout is not None else None

    def _reconnect_next_time(self) -> None:
        retriever, self._retriever, self._sparse_retriever = self._retriever, None, None
        client = getattr(getattr(retriever, "document_store", None), "client", None) if retriever else None
        if client is not None:
            close_quietly(client)

    def describe_filter(self, category: str | None) -> str | None:
        if category is None:
            return None
        if self._layout is not None and not self._layout.has_category:
            return None  # unsupported on this path: see `search`
        return category_filter(category)

    def search(self, embedding: list[float], top_k: int, category: str | None) -> list[Candidate]:
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

    def search_ids(self, embedding: list[float], keys: list[str]) -> list[Candidate]:
        """The dense candidates of exactly these chunk ids (their similarity to the query)."""
        if not keys:
            return []
        self._ready_retriever()
        vector = as_float_list(embedding)
        check_dimension(self._layout, self.collection, len(vector))
        return self._dense(vector, len(keys), {"field": ID_FIELD, "operator": "in", "value": list(keys)})

    def bm25_search(self, text: str, top_k: int, category: str | None) -> list[Bm25Hit]:
        self._ready_retriever()
        if self._sparse_retriever is None:
            raise NoFullTextError(NO_SPARSE_FIELD)
        filters = None if category is None else {"field": CATEGORY_FIELD, "operator": "==", "value": category}
        try:
            documents = self._sparse_retriever.run(query_text=text, filters=filters, top_k=top_k)["documents"]
        except Exception:
            self._reconnect_next_time()
            raise
        return bm25_hits([(str(document.id), document.score) for document in documents])

    def _dense(self, vector: list[float], limit: int, filters: dict | None) -> list[Candidate]:
        layout = self._layout
        try:
            documents = self._retriever.run(query_embedding=vector, filters=filters, top_k=limit)["documents"]
        except Exception:
            # As on the sdk path: a new document store (and connection) on the next search.
            self._reconnect_next_time()
            raise
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
                    haystack_score_label(layout.metric),
                    similarity_from_haystack(float(document.score), layout.metric),
                    self.path,
                )
            )
        return candidates


def _full_text_arguments(layout: CollectionLayout) -> dict[str, Any]:
    """milvus-haystack's arguments for the collection's BM25 field (none without one)."""
    if not layout.has_sparse:
        return {}
    from milvus_haystack.function import BM25BuiltInFunction

    function = BM25BuiltInFunction(
        input_field_names=CONTENT_FIELD, output_field_names=SPARSE_FIELD, function_name=BM25_FUNCTION
    )
    return {"sparse_vector_field": SPARSE_FIELD, "builtin_function": [function]}


def make_search(
    path: str,
    uri: str,
    collection: str,
    index_type: str,
    search_params: dict | None,
    timeout_ms: int | None = None,
    auth: dict | None = None,
) -> VectorSearch:
    if path == "sdk":
        return SdkVectorSearch(uri, collection, search_params, timeout_ms, auth)
    if path == "haystack":
        return HaystackVectorSearch(uri, collection, index_type, search_params, timeout_ms, auth)
    raise ValueError(f"unknown vector store path {path!r}; one of {', '.join(PATHS)}")
