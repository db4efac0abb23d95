"""
The Milvus collection of lookup-knowledge: connection, schema and filter expressions.

One schema serves both vector-store paths: `id` VARCHAR primary key, `content` VARCHAR,
`vector` FLOAT_VECTOR(dim), `metadata` JSON and `category` VARCHAR (the filter column), metric L2.
"""

import logging
from typing import Any

from pymilvus import DataType, MilvusClient

from components.errors import BadInputError, KnowledgeFailure, first_line

logger = logging.getLogger(__name__)

ID_FIELD = "id"
CONTENT_FIELD = "content"
VECTOR_FIELD = "vector"
METADATA_FIELD = "metadata"
CATEGORY_FIELD = "category"
METRIC = "L2"
MAX_CONTENT_CHARS = 65535
MAX_CATEGORY_CHARS = 512
MAX_ID_CHARS = 64

# Milvus Lite serves gRPC from a thread of this very process, with the server's default ping
# policy. pymilvus' client pings every 10 s even without calls, so after about 30 s without a
# call the server answers GOAWAY "too_many_pings"; the next client pymilvus opens on that shared
# connection health-checks it, fails to recover it, and the command dies ("Fail connecting to
# server"). That hit every index run that embedded for more than about half a minute after the
# first connection, and any process that idled that long. An in-process server needs no
# keepalive: no pings without calls, and none during them either.
LITE_GRPC_OPTIONS = {
    "grpc.keepalive_time_ms": 2**31 - 1,
    "grpc.keepalive_permit_without_calls": 0,
}


class MilvusUnavailableError(KnowledgeFailure):
    """The vector store cannot be opened or does not answer."""


class CollectionMismatchError(BadInputError):
    """The existing collection does not fit the configured embedder (another dimension)."""


def _is_lock_error(exc: BaseException) -> bool:
    while exc is not None:
        if type(exc).__name__ == "DataDirLockedError" or "holds the lock" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _is_locked_elsewhere(uri: str) -> bool:
    """
    Whether another process holds the lock of a Milvus Lite db (its folder's LOCK file).

    Milvus Lite logs the lock error in its server thread and pymilvus only raises "Open local
    milvus failed", so the cause is found by trying the lock once (and releasing it at once).
    """
    from pathlib import Path

    lock_file = Path(uri) / "LOCK"
    if not lock_file.is_file():
        return False
    try:
        import fcntl
    except ImportError:  # Windows: no flock probe
        return False
    with open(lock_file, "rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def is_local_uri(uri: str) -> bool:
    """A file path means Milvus Lite (embedded); http(s) or tcp means a server."""
    return "://" not in uri


def connection_args(uri: str) -> dict[str, Any]:
    """Arguments for MilvusClient (and milvus-haystack's connection_args) for a URI."""
    return {"uri": uri, "grpc_options": dict(LITE_GRPC_OPTIONS)} if is_local_uri(uri) else {"uri": uri}


def connect(uri: str) -> MilvusClient:
    """
    Open a client, turning Milvus Lite's file lock into an error that says what to do.

    Milvus Lite lets one process hold a db file; clients in the same process share it.
    """
    if is_local_uri(uri):
        from pathlib import Path

        Path(uri).parent.mkdir(parents=True, exist_ok=True)
    try:
        return MilvusClient(**connection_args(uri))
    except Exception as exc:
        if _is_lock_error(exc) or (is_local_uri(uri) and _is_locked_elsewhere(uri)):
            raise MilvusUnavailableError(
                f"the Milvus Lite database {uri} is held by another process (a running `knowledge serve` "
                "or another command); stop it, or use a Milvus server (milvus=server) that several processes can share"
            ) from exc
        raise MilvusUnavailableError(f"cannot open Milvus at {uri}: {first_line(exc)}") from exc


def index_params_for(index_type: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Index parameters in the shape milvus-haystack and pymilvus both accept."""
    return {"index_type": index_type, "metric_type": METRIC, "params": dict(extra or {})}


def create_collection(
    client: MilvusClient, name: str, dim: int, index_type: str = "FLAT", index_params: dict | None = None
) -> None:
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field(ID_FIELD, DataType.VARCHAR, is_primary=True, max_length=MAX_ID_CHARS)
    schema.add_field(CONTENT_FIELD, DataType.VARCHAR, max_length=MAX_CONTENT_CHARS)
    schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=dim)
    schema.add_field(METADATA_FIELD, DataType.JSON)
    schema.add_field(CATEGORY_FIELD, DataType.VARCHAR, max_length=MAX_CATEGORY_CHARS)
    params = client.prepare_index_params()
    params.add_index(VECTOR_FIELD, index_type=index_type, metric_type=METRIC, params=dict(index_params or {}))
    client.create_collection(name, schema=schema, index_params=params)
    logger.info("Created Milvus collection %s (dim=%d, index=%s, metric=%s)", name, dim, index_type, METRIC)


def collection_dim(client: MilvusClient, name: str) -> int | None:
    for field in client.describe_collection(name)["fields"]:
        if field["name"] == VECTOR_FIELD:
            return int(field["params"]["dim"])
    return None


def ensure_loaded(client: MilvusClient, name: str) -> None:
    """A reopened Milvus Lite collection starts released; searching it needs a load first."""
    state = client.get_load_state(name)
    if "Loaded" not in str(state.get("state", "")):
        client.load_collection(name)


def row_count(client: MilvusClient, name: str) -> int:
    if not client.has_collection(name):
        return 0
    ensure_loaded(client, name)
    result = client.query(name, filter="", output_fields=["count(*)"])
    return int(result[0]["count(*)"])


def quote_string(value: str) -> str:
    """
    A Milvus expression string literal for any value: backslashes and double quotes escaped, so
    a category such as `it"s` or `a" or category != "` can only ever be compared, never parsed.
    """
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def category_filter(category: str) -> str:
    return f"{CATEGORY_FIELD} == {quote_string(category)}"
