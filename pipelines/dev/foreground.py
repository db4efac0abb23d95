"""
`knowledge dev milvus-server` in the foreground: a dev server (the Milvus 2.3 standalone or the
Lite gRPC server) until Ctrl+C or SIGTERM, with one line on stdout when it is ready and one on
stderr each time it stops or starts answering again (a server that hangs says so, it does not
just sit there).
"""

import contextlib
import logging
import signal
import sys
import time
from pathlib import Path

from components.errors import first_line
from pipelines.dev.lite_server import LiteServerProcess
from pipelines.dev.milvus_server import MilvusServerProcess

ENGINES = {"standalone": MilvusServerProcess, "lite": LiteServerProcess}
# What each engine is, for the ready line: which retrieval legs a collection on it can have.
ENGINE_NOTES = {
    "standalone": "Milvus 2.3 standalone, dense leg only",
    "lite": "Milvus Lite gRPC server, dense and BM25 legs, one process",
}
HEALTH_INTERVAL_S = 2.0
HEALTH_TIMEOUT_S = 5.0


class HealthProbe:
    """One RPC to the server on a connection of its own: True when it answers within `timeout_s`."""

    def __init__(self, uri: str, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        import pymilvus  # noqa: F401  (its import configures its loggers: quieted after it)

        # pymilvus logs every failed RPC with a traceback; a failed probe is reported in one health line.
        logging.getLogger("pymilvus.decorators").setLevel(logging.CRITICAL)
        self.uri = uri
        self.timeout_s = timeout_s
        self._client = None
        self.last_error = ""

    def answers(self) -> bool:
        from pymilvus import MilvusClient

        try:
            if self._client is None:
                self._client = MilvusClient(uri=self.uri, timeout=self.timeout_s, dedicated=True)
            self._client.list_collections(timeout=self.timeout_s)
        except Exception as exc:  # any failure means "not answering": a new connection next time
            self.last_error = grpc_status(exc)
            self.close()
            return False
        return True

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


def serve_until_interrupted(data_dir: Path, port: int, engine: str = "standalone") -> int:
    """Run a dev server until Ctrl+C (or SIGTERM): 0 then, 1 when the server itself exits."""

    def interrupted(*_args) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the server group as Ctrl+C does, never orphaning it

    signal.signal(signal.SIGTERM, interrupted)
    with ENGINES[engine](data_dir, port) as server:
        print(
            f"Milvus server ready: milvus.uri={server.uri} ({ENGINE_NOTES[engine]}; data in {data_dir}); "
            "Ctrl+C stops it",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            return watch(server)
    return 0


def watch(server: MilvusServerProcess) -> int:
    """Check the server every few seconds; a line on stderr when its health changes."""
    probe = HealthProbe(server.uri)
    answering = True
    try:
        while server.running:
            now = probe.answers()
            if now != answering:
                answering = now
                print(health_line(server, now, probe.last_error), file=sys.stderr, flush=True)
            time.sleep(HEALTH_INTERVAL_S)
    finally:
        probe.close()
    print(f"knowledge: error: the Milvus server exited; see {server.log_path}", file=sys.stderr, flush=True)
    return 1


def grpc_status(exc: Exception) -> str:
    """The gRPC status of a failed probe ("DEADLINE_EXCEEDED"), else pymilvus' message or the first line."""
    code = getattr(exc, "code", None)
    status = code() if callable(code) else None
    return getattr(status, "name", None) or str(getattr(exc, "message", "") or first_line(exc))


def health_line(server: MilvusServerProcess, answering: bool, error: str) -> str:
    if answering:
        return f"Milvus server at {server.uri} answers again"
    return f"Milvus server at {server.uri} stopped answering ({error}); lookups on it fail until it is back"
