"""
The `/health` report: whether the vector store, the L0 index and the trace store answer, and
which config is loaded. Paths and thresholds only: never credentials or the API key.

Each check has a deadline (`serve.health_timeout_s`): a store that stalls (a stopped Milvus server
accepts connections and never answers) makes its check "degraded" with `timedOut`, instead of
holding the health request for as long as the store's own timeout, or forever.
"""

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from omegaconf import DictConfig
from sqlalchemy import text

from components.errors import first_line
from components.stores.l0_index_file import L0IndexHandle
from components.stores.milvus_collection import close_quietly
from components.tracing.trace_store import TraceStore
from pipelines.config.model_calibration import calibration_in_force
from pipelines.config.settings import knowledge_store
from pipelines.serving.bind import lookup_slots
from pipelines.state.traces import redact_url

logger = logging.getLogger(__name__)


class HealthCheck:
    """
    Probes the three stores a lookup needs. One Milvus client is kept and reopened after a failure.

    With `timeout_s`, the checks run at once in threads of their own (never the lookups' slots) and
    the report waits at most `timeout_s` for them; a check still running from an earlier report is
    waited for again rather than started twice, so a stalled store holds one thread, not one per
    request.

    Usage example:

    ```python
    report = HealthCheck(cfg, trace_store=service.trace_writer.store, auth=False, timeout_s=2.0).report()
    report["status"]  # "ok", or "degraded" when a store does not answer (in time)
    ```
    """

    def __init__(
        self, cfg: DictConfig, trace_store: TraceStore | None, auth: bool, timeout_s: float | None = None
    ) -> None:
        self.cfg = cfg
        self.store = knowledge_store(cfg)
        self.trace_store = trace_store
        self.auth = auth
        self.timeout_s = timeout_s
        self._l0 = L0IndexHandle(cfg.l0.index_path)
        self._client: Any = None
        self._lock = threading.Lock()
        self._running: dict[str, Future] = {}
        self._running_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def vector_store(self) -> dict[str, Any]:
        collection = self.store.collection
        with self._lock:
            try:
                if self._client is None:
                    self._client = self.store.connect()
                if not self._client.has_collection(collection):
                    return {"ok": False, "detail": f"no collection {collection!r}: run `knowledge index` first"}
                rows = int(self._client.get_collection_stats(collection).get("row_count", 0))
            except Exception as exc:
                client, self._client = self._client, None
                if client is not None:
                    close_quietly(client)
                return {"ok": False, "detail": first_line(exc, typed=True)}
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
            return {"ok": False, "detail": first_line(exc, typed=True)}
        return {"ok": True, "documents": len(index.entries)}

    def trace(self) -> dict[str, Any]:
        if self.trace_store is None:
            return {"ok": False, "detail": "no trace writer in the pipeline"}
        try:
            with self.trace_store.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:
            return {"ok": False, "detail": first_line(exc, typed=True), "spooling": True}
        return {"ok": True}

    def config(self) -> dict[str, Any]:
        cfg = self.cfg
        retrieval = cfg.retrieval
        return {
            "collection": cfg.milvus.collection,
            "milvus": "lite" if self.store.is_local else "server",
            "vectorStoreMode": retrieval.vector_store_mode,
            "thresholds": {
                "reference": retrieval.reference_threshold,
                "evidence": retrieval.evidence_threshold,
                "uncoveredEvidence": retrieval.uncovered_evidence_threshold,
                "highRelevance": retrieval.high_relevance,
            },
            "calibration": calibration_in_force(cfg),
            "query": {"maxChars": cfg.query.max_chars, "onOverlong": cfg.query.on_overlong},
            "traceDb": redact_url(cfg.trace.db_url),
            "mlflow": bool(cfg.mlflow.tracking_uri),
            "auth": self.auth,
            "maxBodyBytes": cfg.serve.max_body_bytes,
            "maxConcurrentLookups": lookup_slots(cfg.serve.max_concurrent_lookups),
            "healthTimeoutS": cfg.serve.health_timeout_s,
        }

    def _checks(self) -> dict[str, Callable[[], dict[str, Any]]]:
        return {"vectorStore": self.vector_store, "l0Index": self.l0_index, "traceStore": self.trace}

    def _start(self, name: str, check: Callable[[], dict[str, Any]]) -> Future:
        with self._running_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=len(self._checks()), thread_name_prefix="health")
            future = self._running.get(name)
            if future is None or future.done():
                future = self._running[name] = self._executor.submit(check)
            return future

    def _bounded(self) -> dict[str, dict[str, Any]]:
        """Every check's answer, or `timedOut` for those with none within `timeout_s` (all started at once)."""
        futures = {name: self._start(name, check) for name, check in self._checks().items()}
        results: dict[str, dict[str, Any]] = {}
        for name, future in futures.items():
            try:
                # The checks run in parallel, so each wait is at most the shared deadline.
                results[name] = future.result(timeout=self.timeout_s)
            except FutureTimeout:
                logger.warning("health check %s: no answer within %g s", name, self.timeout_s)
                detail = f"no answer within {self.timeout_s:g} s (serve.health_timeout_s)"
                results[name] = {"ok": False, "timedOut": True, "detail": detail}
        return results

    def report(self) -> dict[str, Any]:
        if self.timeout_s:
            checks = self._bounded()
        else:
            checks = {name: check() for name, check in self._checks().items()}
        status = "ok" if all(check["ok"] for check in checks.values()) else "degraded"
        # The pid tells apart the worker processes of `knowledge serve --workers N` behind one port.
        return {"status": status, "pid": os.getpid(), "checks": checks, "config": self.config()}


def health_route(health: HealthCheck):
    """`GET /health` of a served app: 200 when every check passes, else 503 with the report."""
    import anyio
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    # Threads of its own: a health request never waits for a slot behind lookups or other requests.
    limiter = anyio.CapacityLimiter(4)

    async def health_endpoint(request: Request) -> JSONResponse:
        report = await anyio.to_thread.run_sync(health.report, limiter=limiter)
        return JSONResponse(report, status_code=200 if report["status"] == "ok" else 503)

    return health_endpoint
