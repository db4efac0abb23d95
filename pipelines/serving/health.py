"""
The `/health` report: whether the vector store, the L0 index and the trace store answer, and
which config is loaded. Paths and thresholds only: never credentials or the API key.
"""

import logging
import os
import threading
from typing import Any

from omegaconf import DictConfig
from sqlalchemy import text

from components.stores.l0_index_file import L0IndexHandle
from components.stores.milvus_collection import close_quietly, connect, is_local_uri
from components.tracing.trace_store import TraceStore
from pipelines.serving.bind import lookup_slots
from pipelines.settings import milvus_auth
from pipelines.traces import redact_url

logger = logging.getLogger(__name__)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class HealthCheck:
    """
    Probes the three stores a lookup needs. One Milvus client is kept and reopened after a failure.

    Usage example:

    ```python
    report = HealthCheck(cfg, trace_store=service.trace_writer.store, auth=False).report()
    report["status"]  # "ok", or "degraded" when a store does not answer
    ```
    """

    def __init__(self, cfg: DictConfig, trace_store: TraceStore | None, auth: bool) -> None:
        self.cfg = cfg
        self.trace_store = trace_store
        self.auth = auth
        self._l0 = L0IndexHandle(cfg.l0.index_path)
        self._client: Any = None
        self._lock = threading.Lock()

    def vector_store(self) -> dict[str, Any]:
        collection = self.cfg.milvus.collection
        with self._lock:
            try:
                if self._client is None:
                    self._client = connect(self.cfg.milvus.uri, self.cfg.milvus.timeout_ms, milvus_auth(self.cfg))
                if not self._client.has_collection(collection):
                    return {"ok": False, "detail": f"no collection {collection!r}: run `knowledge index` first"}
                rows = int(self._client.get_collection_stats(collection).get("row_count", 0))
            except Exception as exc:
                client, self._client = self._client, None
                if client is not None:
                    close_quietly(client)
                return {"ok": False, "detail": _first_line(exc)}
        if rows == 0:
            return {
                "ok": False,
                "rows": 0,
                "detail": f"collection {collection!r} is empty: run `knowledge index` first",
            }
        return {"ok": True, "rows": rows}

    def l0_index(self) -> dict[str, Any]:
        try:
            index = self._l0.get()
        except Exception as exc:
            return {"ok": False, "detail": _first_line(exc)}
        return {"ok": True, "documents": len(index.entries)}

    def trace(self) -> dict[str, Any]:
        if self.trace_store is None:
            return {"ok": False, "detail": "no trace writer in the pipeline"}
        try:
            with self.trace_store.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:
            return {"ok": False, "detail": _first_line(exc), "spooling": True}
        return {"ok": True}

    def config(self) -> dict[str, Any]:
        cfg = self.cfg
        retrieval = cfg.retrieval
        return {
            "collection": cfg.milvus.collection,
            "milvus": "lite" if is_local_uri(cfg.milvus.uri) else "server",
            "vectorStoreMode": retrieval.vector_store_mode,
            "thresholds": {
                "reference": retrieval.reference_threshold,
                "evidence": retrieval.evidence_threshold,
                "uncoveredEvidence": retrieval.uncovered_evidence_threshold,
                "highRelevance": retrieval.high_relevance,
            },
            "query": {"maxChars": cfg.query.max_chars, "onOverlong": cfg.query.on_overlong},
            "traceDb": redact_url(cfg.trace.db_url),
            "mlflow": bool(cfg.mlflow.tracking_uri),
            "auth": self.auth,
            "maxBodyBytes": cfg.serve.max_body_bytes,
            "maxConcurrentLookups": lookup_slots(cfg.serve.max_concurrent_lookups),
        }

    def report(self) -> dict[str, Any]:
        checks = {"vectorStore": self.vector_store(), "l0Index": self.l0_index(), "traceStore": self.trace()}
        status = "ok" if all(check["ok"] for check in checks.values()) else "degraded"
        # The pid tells apart the worker processes of `knowledge serve --workers N` behind one port.
        return {"status": status, "pid": os.getpid(), "checks": checks, "config": self.config()}
