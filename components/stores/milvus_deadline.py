"""
One deadline for a lookup's wait on a Milvus server: `milvus.timeout_ms` bounds connecting,
reading the collection and every search of the lookup together, not each call alone.

pymilvus bounds each call by its own `timeout`, and retries a failed call, with back-off sleeps,
for as long as that timeout again; opening a collection is several calls (connect, has, describe,
indexes, load state). Against a server that answers slowly or is loading after a restart, a lookup
took several times its timeout. Here every call gets what is left of one deadline as its
`timeout`, and the whole operation runs in a thread the caller stops waiting for when the
deadline passes: whatever pymilvus does inside, the caller has its answer in time.

Usage example:

```python
with lookup_deadline(10_000):
    hits = within(uri, 10_000, lambda: client.search(..., timeout=call_timeout(10_000)))
```
"""

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from components.stores.lite_db import damaged_error
from components.stores.milvus_collection import is_local_uri
from components.stores.milvus_errors import MilvusUnavailableError

T = TypeVar("T")

# When the current lookup's wait on Milvus ends (time.monotonic), or None outside a lookup.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("milvus_deadline", default=None)


@contextmanager
def lookup_deadline(timeout_ms: int | None) -> Iterator[None]:
    """The deadline of everything inside, unless an outer one is set already (None or 0: none)."""
    if not timeout_ms or _DEADLINE.get() is not None:
        yield
        return
    token = _DEADLINE.set(time.monotonic() + timeout_ms / 1000.0)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def call_timeout(timeout_ms: int | None) -> float | None:
    """The `timeout` of one pymilvus call: what is left of the deadline (a little at least), or the whole limit."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout_ms / 1000.0 if timeout_ms else None
    return max(deadline - time.monotonic(), 0.001)


def timed_out(uri: str, timeout_ms: int) -> MilvusUnavailableError:
    return MilvusUnavailableError(f"Milvus at {uri} did not answer within milvus.timeout_ms ({timeout_ms} ms)")


def within(uri: str, timeout_ms: int | None, operation: Callable[[], T]) -> T:
    """
    Run `operation` and return its result, or raise `timed_out` once the deadline passes.

    A Milvus Lite db is opened from local files by this machine: its time is the file's, and it
    runs inline. A server's operation runs in a daemon thread, left to end by its own call timeouts.
    """
    if is_local_uri(uri):
        try:
            return operation()
        except Exception as exc:  # a damaged Milvus Lite file: name the collection and the way out
            if damaged := damaged_error(exc):
                raise damaged from exc
            raise
    if not timeout_ms:
        return operation()
    with lookup_deadline(timeout_ms):
        left = call_timeout(timeout_ms)
        outcome: dict[str, object] = {}
        context = contextvars.copy_context()  # the deadline reaches the calls made in the thread

        def run() -> None:
            try:
                outcome["result"] = context.run(operation)
            except BaseException as exc:  # handed to the caller, who may be waiting still
                outcome["error"] = exc

        worker = threading.Thread(target=run, name="milvus-call", daemon=True)
        worker.start()
        worker.join(left)
        expired = call_timeout(timeout_ms) <= 0.001
        if worker.is_alive():
            raise timed_out(uri, timeout_ms)
        if "error" in outcome:
            error = outcome["error"]
            if expired:  # pymilvus' own "Deadline Exceeded" or retry message: say which limit it was
                raise timed_out(uri, timeout_ms) from error
            raise error
        return outcome["result"]
