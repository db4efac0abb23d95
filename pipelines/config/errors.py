"""Turning failures into the one-line messages and exit codes the CLI promises."""

import sys
import traceback
from typing import TextIO

from components.common.masking import masked
from components.errors import exit_code_of, first_line


def unwrap_pipeline_error(exc: BaseException) -> BaseException:
    """The error a component raised, without Haystack's PipelineRuntimeError wrapping."""
    haystack_errors = sys.modules.get("haystack.core.errors")
    if haystack_errors is None:  # no pipeline ran in this process (the `--url` client): nothing wraps the error
        return exc
    while isinstance(exc, haystack_errors.PipelineRuntimeError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def report_error(exc: BaseException, debug: bool = False, stream: TextIO | None = None) -> int:
    """
    Write the one stderr line of a failed command and return its exit status: 2 for a
    `BadInputError`, 1 for anything else. With `debug`, the traceback precedes the line.
    """
    stream = stream or sys.stderr
    if debug:
        print(masked("".join(traceback.format_exception(exc))), end="", file=stream)
    error = unwrap_pipeline_error(exc)
    print(f"knowledge: error: {first_line(error)}", file=stream)
    return exit_code_of(error)
