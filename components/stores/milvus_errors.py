"""
The errors of the Milvus store, in a module of their own: the collection, the Milvus Lite file
checks (`lite_db`) and the deadline all raise or read them without importing one another.
"""

from collections.abc import Iterator

from components.errors import BadInputError, KnowledgeFailure


class MilvusUnavailableError(KnowledgeFailure):
    """The vector store cannot be opened or does not answer."""


class CollectionMismatchError(BadInputError):
    """The existing collection does not fit the configured embedder (another dimension)."""


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """
    An exception and its causes (or contexts), each once: some errors are their own cause
    (grpc's `_InactiveRpcError` inside pymilvus), so a plain walk would never end.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__
