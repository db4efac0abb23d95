"""
What a vector search needs of its store, as a protocol: `KnowledgeStore` is the one
implementation, and it makes the searches (`KnowledgeStore.vector_search`). With the protocol the
search module does not import the store module, which imports it.
"""

from typing import Any, Protocol

from pymilvus import MilvusClient

from components.stores.milvus_collection import CollectionLayout


class StoreAccess(Protocol):
    """The settings and connections of a Milvus collection that a search reads."""

    uri: str
    collection: str
    search_params: dict[str, Any]
    timeout_ms: int | None

    @property
    def timeout_s(self) -> float | None:
        """The timeout of one pymilvus call (what is left of a lookup's deadline)."""

    def connection_args(self) -> dict[str, Any]:
        """milvus-haystack's `connection_args`."""

    def open_collection(self) -> tuple[MilvusClient, CollectionLayout]:
        """A client on the existing, loaded collection and its layout."""
