"""Turning failures into the one-line messages and exit codes the CLI promises."""

from haystack.core.errors import PipelineRuntimeError


def unwrap_pipeline_error(exc: BaseException) -> BaseException:
    """The error a component raised, without Haystack's PipelineRuntimeError wrapping."""
    while isinstance(exc, PipelineRuntimeError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc
