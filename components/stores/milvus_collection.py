"""
The Milvus collection of lookup-knowledge: connection, schema and filter expressions.

One schema serves both vector-store paths: `id` VARCHAR primary key, `content` VARCHAR,
`vector` FLOAT_VECTOR(dim), `metadata` JSON and `category` VARCHAR (the filter column), metric L2;
with full text on, also `sparse` SPARSE_FLOAT_VECTOR, computed by Milvus's built-in BM25
function from `content` (index SPARSE_INVERTED_INDEX, metric BM25) for the lexical leg.
An existing collection with only the first four fields, without `sparse`, or with another metric
(IP, COSINE), is reused as it is: `describe_layout` reads what it has, and nothing here ever alters it.
"""

import logging
import os
from dataclasses import dataclass
from typing import Any

from pymilvus import DataType, Function, FunctionType, MilvusClient

from components.common.masking import masked
from components.errors import first_line
from components.stores.milvus_errors import CollectionMismatchError, MilvusUnavailableError, exception_chain

logger = logging.getLogger(__name__)

# Log records of pymilvus that are known noise here, by logger: the query iterator warns on every
# iteration over Milvus Lite, which has no server-side session timestamp (the client-side one it
# falls back to is what a one-process store needs); and every failed call is logged with a
# traceback (a Milvus error, or gRPC's own such as a deadline) although the exception reaches the
# caller, which reports it in one line.
_KNOWN_NOISE = {
    "pymilvus.client.iterator.query_iterator": ("failed to get mvccTs from milvus server",),
    "pymilvus.decorators": ("RPC error: [", "grpc RpcError: ["),
}


class _DropKnownNoise(logging.Filter):
    def __init__(self, prefix: tuple[str, ...]) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def _quiet_known_pymilvus_noise() -> None:
    """Install the filters once (importing this module again adds nothing)."""
    for name, prefix in _KNOWN_NOISE.items():
        noisy = logging.getLogger(name)
        if not any(isinstance(f, _DropKnownNoise) for f in noisy.filters):
            noisy.addFilter(_DropKnownNoise(prefix))


_quiet_known_pymilvus_noise()

ID_FIELD = "id"
CONTENT_FIELD = "content"
VECTOR_FIELD = "vector"
METADATA_FIELD = "metadata"
CATEGORY_FIELD = "category"
SPARSE_FIELD = "sparse"
BM25_FUNCTION = "content_bm25"
BM25_METRIC = "BM25"
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


def _is_lock_error(exc: BaseException) -> bool:
    return any(
        type(link).__name__ == "DataDirLockedError" or "holds the lock" in str(link) for link in exception_chain(exc)
    )


def is_locked_elsewhere(uri: str) -> bool:
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


def timeout_seconds(timeout_ms: int | None) -> float | None:
    """`milvus.timeout_ms` as pymilvus takes it (None or 0: no limit)."""
    return timeout_ms / 1000.0 if timeout_ms else None


def connection_args(uri: str, timeout_ms: int | None = None, auth: dict[str, Any] | None = None) -> dict[str, Any]:
    """
    Arguments for MilvusClient (and milvus-haystack's connection_args) for a URI. A server gets a
    connection of its own per client (`dedicated`): pymilvus shares one channel per address, and a
    shared channel that failed while the server was down stays failed for every client of the
    process after the server is back; a client of its own is dropped and reopened instead.
    """
    args: dict[str, Any] = {"uri": uri}
    if is_local_uri(uri):
        args["grpc_options"] = dict(LITE_GRPC_OPTIONS)
    else:
        args["dedicated"] = True
    if timeout_ms:
        args["timeout"] = timeout_seconds(timeout_ms)
    if auth and not is_local_uri(uri):  # Milvus Lite has no users
        args.update(auth)
    return args


def close_quietly(client: Any) -> None:
    """Release a client that failed: its channel may be broken, and closing it must not raise."""
    try:
        client.close()
    except Exception as exc:  # a broken channel may fail to close; the client is dropped anyway
        logger.debug("closing a failed Milvus client: %s", exc)


def connect(uri: str, timeout_ms: int | None = None, auth: dict[str, Any] | None = None) -> MilvusClient:
    """
    Open a client, turning Milvus Lite's file lock into an error that says what to do.

    Milvus Lite lets one process hold a db file; clients in the same process share it.
    `timeout_ms` bounds the connection attempt to a server; `auth` is `MilvusAuth.connect_args()`.
    """
    if is_local_uri(uri):
        from pathlib import Path

        Path(uri).parent.mkdir(parents=True, exist_ok=True)
    try:
        client = MilvusClient(**connection_args(uri, timeout_ms, auth))
    except Exception as exc:
        if _is_lock_error(exc) or (is_local_uri(uri) and is_locked_elsewhere(uri)):
            raise MilvusUnavailableError(
                f"the Milvus Lite database {uri} is held by another process (a running server or index); "
                "ask the server instead (`knowledge lookup --url http://127.0.0.1:1416 QUERY`), "
                "stop it, or use a Milvus server (milvus=server) that several processes can share"
            ) from exc
        from components.stores.lite_db import is_plain_file, plain_file_message, read_only_folder, read_only_message

        if is_local_uri(uri) and is_plain_file(uri):
            raise MilvusUnavailableError(plain_file_message(uri)) from exc
        if is_local_uri(uri) and (folder := read_only_folder(uri)):
            raise MilvusUnavailableError(read_only_message(uri, folder)) from exc
        reason = str(getattr(exc, "message", None) or exc).strip() or type(exc).__name__
        raise MilvusUnavailableError(f"cannot open Milvus at {masked(uri)}: {reason.splitlines()[0]}") from exc
    if is_local_uri(uri):
        _OPENED_HERE.add(os.path.abspath(uri))
    return client


# The Lite dbs this process opened: their lock is its own (pipelines/state/lite_snapshot.py reads the others' copies).
_OPENED_HERE: set[str] = set()


def opened_here(uri: str) -> bool:
    """Whether this process opened the Milvus Lite db (it then holds the lock itself)."""
    return os.path.abspath(uri) in _OPENED_HERE


def index_params_for(index_type: str, extra: dict[str, Any] | None = None, metric: str = METRIC) -> dict[str, Any]:
    """Index parameters in the shape milvus-haystack and pymilvus both accept."""
    return {"index_type": index_type, "metric_type": metric, "params": dict(extra or {})}


@dataclass(frozen=True)
class CollectionLayout:
    """What an existing collection has: vector dimension, metric, index type, a `category` column or not."""

    dim: int
    metric: str = METRIC
    index_type: str = "FLAT"
    has_category: bool = True
    # A `sparse` field that Milvus fills with BM25 from `content`: the full-text leg can run.
    has_sparse: bool = False
    content_max_chars: int = MAX_CONTENT_CHARS
    category_max_chars: int = MAX_CATEGORY_CHARS


def describe_layout(client: MilvusClient, name: str, timeout: float | None = None) -> CollectionLayout:
    """
    Read an existing collection's layout. Refuses one without the `id`, `content`, `vector` and
    `metadata` fields, or with a metric the scores cannot be normalized from.
    """
    description = client.describe_collection(name, timeout=timeout)
    fields = {field["name"]: field for field in description["fields"]}
    missing = [f for f in (ID_FIELD, CONTENT_FIELD, VECTOR_FIELD, METADATA_FIELD) if f not in fields]
    if missing:
        raise CollectionMismatchError(
            f"collection {name} lacks the field(s) {', '.join(missing)}: "
            f"it needs {ID_FIELD}, {CONTENT_FIELD}, {VECTOR_FIELD} and {METADATA_FIELD}"
        )
    metric, index_type = METRIC, "FLAT"
    for index_name in client.list_indexes(name, field_name=VECTOR_FIELD, timeout=timeout) or []:
        described = client.describe_index(name, index_name, timeout=timeout)
        metric = str(described.get("metric_type") or METRIC).upper()
        index_type = str(described.get("index_type") or index_type)
    if metric not in ("L2", "IP", "COSINE"):
        raise CollectionMismatchError(f"collection {name} uses metric {metric}; supported: L2, IP, COSINE")
    category = fields.get(CATEGORY_FIELD)
    bm25_outputs = {
        name
        for function in description.get("functions") or []
        if function.get("type") == FunctionType.BM25
        for name in function.get("output_field_names") or []
    }
    return CollectionLayout(
        dim=int(fields[VECTOR_FIELD]["params"]["dim"]),
        metric=metric,
        index_type=index_type,
        has_category=category is not None,
        has_sparse=SPARSE_FIELD in fields and SPARSE_FIELD in bm25_outputs,
        content_max_chars=int(fields[CONTENT_FIELD].get("params", {}).get("max_length") or MAX_CONTENT_CHARS),
        category_max_chars=int((category or {}).get("params", {}).get("max_length") or MAX_CATEGORY_CHARS),
    )


def check_dimension(layout: CollectionLayout, name: str, dim: int) -> None:
    """Refuse an embedder whose vectors do not fit the collection, naming both dimensions."""
    if layout.dim != dim:
        raise CollectionMismatchError(
            f"collection {name} holds {layout.dim}-d vectors but the embedder gives {dim}-d: "
            "run `knowledge index --rebuild` (or choose another milvus.collection or embedder)"
        )


def create_collection(
    client: MilvusClient,
    name: str,
    dim: int,
    index_type: str = "FLAT",
    index_params: dict | None = None,
    full_text: bool = False,
) -> str | None:
    """
    Create the collection; with `full_text`, with the BM25 `sparse` field too. A Milvus without
    BM25 functions (a server older than 2.5) gets the dense-only collection instead.

    :returns: None, or why the collection has no full-text field although `full_text` asked for it.
    """
    if full_text:
        existed = client.has_collection(name)
        try:
            _create(client, name, dim, index_type, index_params, full_text=True)
            return None
        except Exception as exc:  # the server's own words say which feature it lacks
            if existed:
                raise
            if client.has_collection(name):
                # Milvus 2.3 creates the collection, then refuses the sparse field's index.
                client.drop_collection(name)
            reason = f"this Milvus cannot create a BM25 function ({first_line(exc)}); created {name} dense-only"
            logger.warning("Full text off for collection %s: %s", name, reason)
            _create(client, name, dim, index_type, index_params, full_text=False)
            return reason
    _create(client, name, dim, index_type, index_params, full_text=False)
    return None


def _create(
    client: MilvusClient, name: str, dim: int, index_type: str, index_params: dict | None, full_text: bool
) -> None:
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field(ID_FIELD, DataType.VARCHAR, is_primary=True, max_length=MAX_ID_CHARS)
    schema.add_field(CONTENT_FIELD, DataType.VARCHAR, max_length=MAX_CONTENT_CHARS, enable_analyzer=full_text)
    schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=dim)
    schema.add_field(METADATA_FIELD, DataType.JSON)
    schema.add_field(CATEGORY_FIELD, DataType.VARCHAR, max_length=MAX_CATEGORY_CHARS)
    params = client.prepare_index_params()
    params.add_index(VECTOR_FIELD, index_type=index_type, metric_type=METRIC, params=dict(index_params or {}))
    if full_text:
        schema.add_field(SPARSE_FIELD, DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            Function(
                name=BM25_FUNCTION,
                function_type=FunctionType.BM25,
                input_field_names=[CONTENT_FIELD],
                output_field_names=[SPARSE_FIELD],
            )
        )
        params.add_index(SPARSE_FIELD, index_type="SPARSE_INVERTED_INDEX", metric_type=BM25_METRIC)
    client.create_collection(name, schema=schema, index_params=params)
    logger.info(
        "Created Milvus collection %s (dim=%d, index=%s, metric=%s, full text %s)",
        name,
        dim,
        index_type,
        METRIC,
        "on" if full_text else "off",
    )


def ensure_loaded(client: MilvusClient, name: str, timeout: float | None = None) -> None:
    """A reopened Milvus Lite collection starts released; searching it needs a load first."""
    state = client.get_load_state(name, timeout=timeout)
    if "Loaded" not in str(state.get("state", "")):
        client.load_collection(name, timeout=timeout)


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


def category_filter(category: str, has_column: bool = True) -> str:
    """The filter on a category: the `category` column, or the JSON key of a collection without it."""
    field = CATEGORY_FIELD if has_column else f'{METADATA_FIELD}["{CATEGORY_FIELD}"]'
    return f"{field} == {quote_string(category)}"
