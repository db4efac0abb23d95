"""
The MLflow export process of `components.tracing.mlflow_sink.MlflowTraceSink`:

    python -m components.tracing.mlflow_export_worker        (started by the sink, never by hand)

It reads JSON lines on stdin and answers JSON lines on stdout:

- `{"op": "setup", "tracking_uri", "experiment", "artifact_location", "activity_path"}` ->
  `{"op": "state", "state":
  "ready" | "disabled", "reason", "experiment_id"}`: sets MLflow's tracking URI (global in this
  process only) and gets or creates the experiment (with its artifact location).
- `{"op": "trace", "trace": {...}}`: one lookup as one MLflow trace: a root span and one child
  span per pipeline component, with explicit start/end times, tags and attributes. Written once
  the parent's activity counter (`activity_path`, 8 bytes) has read 0 for a moment, or at once
  when a flush or the end of input is waiting behind it, or when the backlog is long.
- `{"op": "flush", "token": n}` -> `{"op": "flushed", "token": n, "exported": k, "failed": f}`
  once MLflow has written everything received so far.
- End of input: flush and exit.

MLflow's SQL store costs tens of milliseconds of CPU per trace (ORM sessions, one commit per
write); in this process, at a lower CPU priority, that work never holds the lookup process's
GIL or its CPU when the lookups need it. It imports MLflow only, not Haystack or torch.
"""

import json
import logging
import mmap
import os
import queue
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger("knowledge.mlflow_export")

IDLE_SETTLE_S = 0.02
MAX_DEFERRED = 500


def _reply(message: dict[str, Any]) -> None:
    try:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError, ValueError):
        # The parent has exited (a one-shot command): keep exporting what it sent, silently.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115


class Exporter:
    def __init__(self) -> None:
        self.experiment_id: str | None = None
        self.exported = 0
        self.failed = 0
        self._warned = False
        self._activity: mmap.mmap | None = None

    def watch(self, activity_path: str | None) -> None:
        """Map the parent's activity counter (lookups in progress)."""
        if not activity_path:
            return
        try:
            with open(activity_path, "rb") as handle:
                self._activity = mmap.mmap(handle.fileno(), 8, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            logger.debug("no activity counter (%s): exporting without waiting for pauses", exc)

    def busy(self) -> bool:
        return self._activity is not None and struct.unpack_from("q", self._activity, 0)[0] > 0

    def wait_for_pause(self, urgent) -> None:
        """Return after IDLE_SETTLE_S with no lookup in the parent, or as soon as `urgent()`."""
        if self._activity is None:
            return
        quiet_since = None
        while not urgent():
            if self.busy():
                quiet_since = None
            else:
                now = time.monotonic()
                quiet_since = quiet_since or now
                if now - quiet_since >= IDLE_SETTLE_S:
                    return
            time.sleep(0.005)

    def setup(self, tracking_uri: str, experiment: str, artifact_location: str | None) -> dict[str, Any]:
        try:
            import mlflow
            from mlflow import MlflowClient

            logging.getLogger("mlflow").setLevel(logging.WARNING)
            mlflow.set_tracking_uri(tracking_uri)
            client = MlflowClient(tracking_uri)
            found = client.get_experiment_by_name(experiment)
            if found is None:
                artifact = Path(artifact_location).resolve().as_uri() if artifact_location else None
                try:
                    self.experiment_id = client.create_experiment(experiment, artifact_location=artifact)
                except Exception:  # created meanwhile by another process
                    found = client.get_experiment_by_name(experiment)
                    if found is None:
                        raise
            if found is not None:
                self.experiment_id = found.experiment_id
        except Exception as exc:
            text = str(exc).strip().splitlines()
            return {"op": "state", "state": "disabled", "reason": f"{type(exc).__name__}: {text[0] if text else ''}"}
        return {"op": "state", "state": "ready", "experiment_id": self.experiment_id}

    def export(self, trace: dict[str, Any]) -> None:
        import mlflow
        from mlflow.entities import SpanStatus, SpanStatusCode

        def status(error: str | None) -> Any:
            return SpanStatus(SpanStatusCode.ERROR, error) if error else "OK"

        root = mlflow.start_span_no_context(
            name=trace["name"],
            span_type="TOOL",
            inputs=trace["inputs"],
            attributes={"invocation_id": trace["invocation_id"], "tool_name": trace["tool_name"]},
            tags=trace["tags"],
            experiment_id=self.experiment_id,
            start_time_ns=trace["start_ns"],
        )
        for child in trace["spans"]:
            span = mlflow.start_span_no_context(
                name=child["name"],
                span_type=child["span_type"],
                parent_span=root,
                inputs=child["inputs"],
                attributes={"component_type": child.get("component_type") or ""},
                start_time_ns=child["start_ns"],
            )
            span.end(outputs=child["outputs"], status=status(child.get("error")), end_time_ns=child["end_ns"])
        root.end(
            outputs=trace["outputs"],
            attributes={"retrieval_details": trace["details"]},
            status=status(trace.get("error")),
            end_time_ns=trace["end_ns"],
        )
        self.exported += 1

    def flush(self) -> None:
        if self.experiment_id is not None:
            import mlflow

            mlflow.flush_trace_async_logging()


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s knowledge.mlflow_export: %(message)s")
    nice = int(os.environ.get("KNOWLEDGE_MLFLOW_EXPORT_NICE", "10"))
    if nice and hasattr(os, "nice"):
        try:
            os.nice(nice)  # lookups first: export uses the CPU they leave
        except OSError:
            pass
    exporter = Exporter()
    # Read stdin on a thread into memory, so the parent never blocks on a full pipe while this
    # process is busy (importing MLflow, writing a trace); the parent may exit right after sending.
    inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
    waiting = {"flush": 0, "end": False}
    waiting_lock = threading.Lock()

    def read() -> None:
        for raw in sys.stdin:
            if raw.strip():
                message = json.loads(raw)
                if message.get("op") == "flush":
                    with waiting_lock:
                        waiting["flush"] += 1
                inbox.put(message)
        waiting["end"] = True
        inbox.put(None)

    def urgent() -> bool:
        return bool(waiting["flush"]) or waiting["end"] or inbox.qsize() >= MAX_DEFERRED

    threading.Thread(target=read, name="stdin", daemon=True).start()
    while (message := inbox.get()) is not None:
        op = message.get("op")
        if op == "setup":
            exporter.watch(message.get("activity_path"))
            _reply(exporter.setup(message["tracking_uri"], message["experiment"], message.get("artifact_location")))
        elif op == "trace":
            exporter.wait_for_pause(urgent)
            try:
                exporter.export(message["trace"])
                if not urgent():
                    exporter.flush()  # write it now, inside the pause, not during the next lookup
            except Exception as exc:  # one bad trace never stops the exporter
                exporter.failed += 1
                if not exporter._warned:
                    exporter._warned = True
                    logger.warning("MLflow trace export failed (%s); later failures are not reported", exc)
        elif op == "flush":
            exporter.flush()
            with waiting_lock:
                waiting["flush"] -= 1
            _reply(
                {
                    "op": "flushed",
                    "token": message.get("token"),
                    "exported": exporter.exported,
                    "failed": exporter.failed,
                }
            )
    exporter.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
