"""
Per-component timings and inputs/outputs of a running Haystack pipeline, for the MLflow trace.

Haystack opens one `haystack.pipeline.run` span per run and one `haystack.component.run` span per
component through its global tracer. `StageRecorderTracer` wraps whatever tracer is installed
(often Haystack's `NullTracer`) and, during a top-level pipeline run, keeps for each component its
start and end time and *references* to its inputs and outputs in a `StageRecording` held in a
context variable, so each thread (each concurrent lookup) has its own. Nothing is serialized
while the pipeline runs: `TraceWriter` hands the recording to the MLflow sink, which writes a
brief of it (`components.tracing.trace_summary`).

The tracer is installed once per process by `install()` (idempotent), only when MLflow tracing
is configured; without it, recordings stay empty and nothing changes. Calls are passed on to
the wrapped tracer, so an OpenTelemetry or logging tracer installed before keeps working.

Usage example:

```python
from components.tracing import stage_recorder

stage_recorder.install()
pipeline.run({...})               # a TraceWriter inside reads stage_recorder.current_recording()
stage_recorder.last_recording()   # after the run (or its failure), in the same thread
```
"""

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from haystack import tracing
from haystack.tracing import Span, Tracer

from components.common.masking import masked

PIPELINE_OPERATION = "haystack.pipeline.run"
COMPONENT_OPERATION = "haystack.component.run"
_INPUT_TAG = "haystack.component.input"
_OUTPUT_TAG = "haystack.component.output"

_current: ContextVar["StageRecording | None"] = ContextVar("knowledge_stage_recording", default=None)
_last: ContextVar["StageRecording | None"] = ContextVar("knowledge_last_stage_recording", default=None)
_install_lock = threading.Lock()


@dataclass
class Stage:
    """One component run: wall-clock times in ns since the epoch, references to its data."""

    name: str
    component_type: str | None
    start_ns: int
    end_ns: int | None = None
    inputs: Any = None
    outputs: Any = None
    error: str | None = None


@dataclass
class StageRecording:
    """The component runs of one top-level pipeline run, in start order."""

    start_ns: int
    end_ns: int | None = None
    stages: list[Stage] = field(default_factory=list)
    error: str | None = None

    def stage(self, name: str) -> Stage | None:
        return next((s for s in reversed(self.stages) if s.name == name), None)


class _RecordingSpan(Span):
    """A Haystack span that keeps content tags for the recording, then passes everything on."""

    def __init__(self, inner: Span, stage: Stage | None) -> None:
        self._inner = inner
        self._stage = stage

    def set_tag(self, key: str, value: Any) -> None:
        self._inner.set_tag(key, value)

    def set_content_tag(self, key: str, value: Any) -> None:
        if self._stage is not None:
            if key == _INPUT_TAG:
                self._stage.inputs = value
            elif key == _OUTPUT_TAG:
                self._stage.outputs = value
        self._inner.set_content_tag(key, value)

    def raw_span(self) -> Any:
        return self._inner.raw_span()

    def get_correlation_data_for_logs(self) -> dict[str, Any]:
        return self._inner.get_correlation_data_for_logs()


class StageRecorderTracer(Tracer):
    """A Haystack tracer that records stages into the current `StageRecording`, then delegates."""

    def __init__(self, delegate: Tracer) -> None:
        self.delegate = delegate

    @contextlib.contextmanager
    def trace(
        self, operation_name: str, tags: dict[str, Any] | None = None, parent_span: Span | None = None
    ) -> Iterator[Span]:
        recording = _current.get()
        token = None
        stage = None
        if operation_name == PIPELINE_OPERATION and recording is None:
            recording = StageRecording(start_ns=time.time_ns())
            token = _current.set(recording)
        elif operation_name == COMPONENT_OPERATION and recording is not None:
            tags = tags or {}
            stage = Stage(
                name=str(tags.get("haystack.component.name", "component")),
                component_type=tags.get("haystack.component.type"),
                start_ns=time.time_ns(),
            )
            recording.stages.append(stage)
        try:
            with self.delegate.trace(operation_name, tags=tags, parent_span=parent_span) as inner:
                yield _RecordingSpan(inner, stage)
        except BaseException as exc:
            message = f"{type(exc).__name__}: {masked(str(exc))}"
            if stage is not None:
                stage.error = message
            elif token is not None and recording is not None:
                recording.error = message
            raise
        finally:
            now = time.time_ns()
            if stage is not None:
                stage.end_ns = now
            if token is not None and recording is not None:
                recording.end_ns = now
                _current.reset(token)
                _last.set(recording)

    def current_span(self) -> Span | None:
        return self.delegate.current_span()


def install() -> None:
    """Wrap Haystack's current tracer with a `StageRecorderTracer` (once per process)."""
    with _install_lock:
        if not isinstance(tracing.tracer.actual_tracer, StageRecorderTracer):
            tracing.enable_tracing(StageRecorderTracer(tracing.tracer.actual_tracer))


def current_recording() -> StageRecording | None:
    """The recording of the pipeline run in progress in this context (None without the tracer)."""
    return _current.get()


def last_recording() -> StageRecording | None:
    """The recording of the last pipeline run that ended in this context (for failed runs)."""
    return _last.get()


def until_failed(
    recording: StageRecording | None, failed_stage: str | None, error: BaseException
) -> StageRecording | None:
    """
    The recording as it stood when `failed_stage` failed: a component that returned its failure
    as an output (`ComponentFailure`) ended without an error of its own, and components that did
    not need its outputs may have run after it. The copy marks that stage failed with `error` and
    ends with it; a stage that raised is already so, and the recording comes back unchanged.
    """
    stage = recording.stage(failed_stage) if recording is not None and failed_stage else None
    if recording is None or stage is None or stage.error:
        return recording
    message = f"{type(error).__name__}: {masked(str(error))}"
    failed = dataclasses.replace(stage, outputs=None, error=message)
    position = next(i for i, recorded in enumerate(recording.stages) if recorded is stage)
    stages = [*recording.stages[:position], failed]
    return dataclasses.replace(recording, stages=stages, end_ns=failed.end_ns, error=recording.error or message)


def clear_last_recording() -> None:
    _last.set(None)
