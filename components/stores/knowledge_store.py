"""
The Milvus store of lookup-knowledge as one serializable value (`KnowledgeStore`).

Haystack hands one DocumentStore to its retriever and its writer; here the components that open
Milvus (IndexPlanner, MilvusChunkWriter, FallbackRetriever, SidecarComparator) take one `store`
init parameter holding the connection, the collection and the facts of its index, and get their
clients and both vector-search paths from it. It serializes in Haystack's envelope, its
credentials as `MilvusAuth` (environment variable names, never values), so a pipeline file
loads it back as a nested init parameter. Design notes: docs/milvus.md.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from haystack.core.serialization import default_from_dict, default_to_dict
from pymilvus import MilvusClient

from components.common.choices import (
    IndexType,
    check_at_least,
    check_choice,
    check_collection_name,
    check_flags,
    check_milvus_uri,
)
from components.errors import ParameterError
from components.stores.lite_db import damaged_error
from components.stores.milvus_auth import MilvusAuth
from components.stores.milvus_collection import (
    CollectionLayout,
    close_quietly,
    connect,
    connection_args,
    describe_layout,
    ensure_loaded,
    is_local_uri,
    row_count,
)
from components.stores.milvus_deadline import call_timeout
from components.stores.vector_search import VectorSearch, make_search


def check_store(store: "KnowledgeStore") -> None:
    """The `store` init parameter of the components that open Milvus."""
    if not isinstance(store, KnowledgeStore):
        raise ParameterError("store", type(store).__name__, "must be a KnowledgeStore")


@dataclass(frozen=True)
class KnowledgeStore:
    """
    Where the chunks live and how to reach them: Milvus URI (a file path for Milvus Lite),
    credentials and TLS (`auth`), the limit of a connection attempt and of one search
    (`timeout_ms`, None or 0: none), the collection, the vector index a new collection gets
    (`index_type`, `index_params`), the search parameters, and whether a new collection gets the
    BM25 full-text field (`full_text`). Its repr shows where secrets come from, never their values.

    Usage example:

    ```python
    store = KnowledgeStore(uri=".knowledge/milvus.db", collection="knowledge")
    retriever = FallbackRetriever(store=store)
    store.vector_search("sdk").search(embedding, top_k=5, category=None)
    store.to_dict()  # {"type": "components.stores.knowledge_store.KnowledgeStore", "init_parameters": {...}}
    ```
    """

    uri: str
    collection: str = "knowledge"
    auth: MilvusAuth | None = None
    timeout_ms: int | None = 10000
    index_type: str = "FLAT"
    index_params: dict[str, Any] = field(default_factory=dict)
    search_params: dict[str, Any] = field(default_factory=dict)
    full_text: bool = True

    def __post_init__(self) -> None:
        # Any other form would fail only at the first search, as a failure rather than bad input.
        check_milvus_uri(self.uri)
        check_collection_name(self.collection)
        if self.auth is not None and not isinstance(self.auth, MilvusAuth):
            raise ParameterError("auth", repr(self.auth), "must be a MilvusAuth, or None")
        if self.timeout_ms is not None:
            check_at_least(0, timeout_ms=self.timeout_ms)
        check_choice("index_type", self.index_type, IndexType.values())
        for name in ("index_params", "search_params"):
            if not isinstance(getattr(self, name) or {}, Mapping):
                raise ParameterError(name, repr(getattr(self, name)), "must map Milvus parameters to values")
        check_flags(full_text=self.full_text)
        # Copies, so that a caller's dict changed later cannot change a frozen store.
        object.__setattr__(self, "index_params", dict(self.index_params or {}))
        object.__setattr__(self, "search_params", dict(self.search_params or {}))

    @property
    def is_local(self) -> bool:
        """Milvus Lite (a file, one process) rather than a server."""
        return is_local_uri(self.uri)

    @property
    def timeout_s(self) -> float | None:
        """
        The `timeout` of one pymilvus call: `timeout_ms` in seconds, or inside a lookup what is left
        of its deadline (`milvus_deadline`).
        """
        return call_timeout(self.timeout_ms)

    def credentials(self) -> dict[str, Any]:
        """The resolved credential and TLS arguments (secrets: never log them)."""
        return self.auth.connect_args() if self.auth else {}

    def connect(self) -> MilvusClient:
        """A client of this Milvus (`MilvusUnavailableError` when it cannot be opened)."""
        return connect(self.uri, self.timeout_ms, self.credentials())

    def connection_args(self) -> dict[str, Any]:
        """milvus-haystack's `connection_args` for this Milvus (secrets: never log them)."""
        return connection_args(self.uri, self.timeout_ms, self.credentials())

    def open_collection(self) -> tuple[MilvusClient, CollectionLayout]:
        """A client on the existing, loaded collection and its layout; never creates or alters it."""
        left = self.timeout_s
        client = connect(self.uri, max(int(left * 1000), 1) if left else None, self.credentials())
        try:
            if not self.has_collection(client):
                raise LookupError(f"collection {self.collection} does not exist at {self.uri}: run `knowledge index`")
            layout = describe_layout(client, self.collection, timeout=self.timeout_s)
            ensure_loaded(client, self.collection, timeout=self.timeout_s)
        except Exception:
            close_quietly(client)
            raise
        return client, layout

    def has_collection(self, client: MilvusClient) -> bool:
        """Whether the collection exists; a damaged Milvus Lite collection is an error that says what to do."""
        try:
            return client.has_collection(self.collection, timeout=self.timeout_s)
        except Exception as exc:
            if damaged := damaged_error(exc):
                raise damaged from exc
            raise

    def row_count(self, client: MilvusClient | None = None) -> int:
        """Rows of the collection (0 when it does not exist)."""
        return row_count(client or self.connect(), self.collection)

    def rows(self, fields: list[str], client: MilvusClient | None = None) -> Iterator[dict[str, Any]]:
        """Every row of the existing collection, with `fields`, read in batches (nothing when it does not exist)."""
        client = client or self.connect()
        if not self.has_collection(client):
            return
        ensure_loaded(client, self.collection)
        iterator = client.query_iterator(self.collection, batch_size=1000, filter="", output_fields=fields)
        try:
            while batch := iterator.next():
                yield from batch
        finally:
            iterator.close()

    def vector_search(self, path: str) -> VectorSearch:
        """A search of the collection on one path: `sdk` (pymilvus) or `haystack` (milvus-haystack)."""
        return make_search(path, self)

    def to_dict(self) -> dict[str, Any]:
        """Haystack's `{"type", "init_parameters"}` envelope (credentials as `MilvusAuth.to_dict()`)."""
        return default_to_dict(
            self,
            uri=self.uri,
            collection=self.collection,
            auth=self.auth,
            timeout_ms=self.timeout_ms,
            index_type=self.index_type,
            index_params=dict(self.index_params),
            search_params=dict(self.search_params),
            full_text=self.full_text,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KnowledgeStore":
        """
        The value `to_dict` wrote. Its `auth` is read as a `MilvusAuth` here rather than imported by
        name, so a store loads the same inside and outside a pipeline file's module allowlist.
        """
        params = dict(data.get("init_parameters") or {})
        if isinstance(params.get("auth"), dict):
            params["auth"] = MilvusAuth.from_dict(params["auth"])
        return default_from_dict(cls, {**data, "init_parameters": params})
