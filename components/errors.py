"""
The error hierarchy of lookup-knowledge and the one-line form of any exception.

Every error the tool raises on purpose is a `KnowledgeError`: a `BadInputError` when the caller
can fix it (query, file, configuration, model name, knowledge base not indexed; exit status 2) or
a `KnowledgeFailure` when something failed that the input does not explain (vector store down,
trace store unusable; exit status 1). Anything else is unexpected and counts as a failure.

    try:
        service.lookup(query)
    except BadInputError as exc:
        print(f"knowledge: error: {first_line(exc)}")
"""

from dataclasses import dataclass, field
from typing import Any

from components.common.masking import masked

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


class KnowledgeError(Exception):
    """Base of every error lookup-knowledge raises on purpose."""

    exit_code = EXIT_FAILURE


class BadInputError(KnowledgeError, ValueError):
    """The input (query, file, configuration, model, knowledge base) cannot be used as given."""

    exit_code = EXIT_BAD_INPUT


class ParameterError(BadInputError):
    """
    An init parameter out of its bound: `parameter` (a dotted path into a mapping parameter, e.g.
    `weights.bm25`), the value as shown and the rule it breaks, so that whoever built the component
    from a config can name the config key instead (`rename`).
    """

    def __init__(self, parameter: str, shown: str, rule: str) -> None:
        super().__init__(f"{parameter}={shown} {rule}")
        self.parameter, self.shown, self.rule = parameter, shown, rule

    def rename(self, key: str) -> str:
        """The message with the parameter's config key in its place: `retrieval.top_k=-3: must be at least 1`."""
        return f"{key}={self.shown}: {self.rule}"


class KnowledgeFailure(KnowledgeError, RuntimeError):
    """Something the input does not explain failed: the vector store, the trace store."""

    exit_code = EXIT_FAILURE


def exit_code_of(exc: BaseException) -> int:
    """2 for bad input, 1 for any other error (also one that is no `KnowledgeError`)."""
    return exc.exit_code if isinstance(exc, KnowledgeError) else EXIT_FAILURE


def first_line(exc: BaseException, *, lines: int = 1, typed: bool = False, from_cause: bool = False) -> str:
    """
    The first nonblank line of an exception's message, or its type name when it has none: the one
    form every message, log line and trace uses.

    :param lines: How many nonblank lines to keep, joined by a space (a YAML error names the
        problem on its first line and where it is on the second).
    :param typed: Put the type name in front ("TimeoutError: timed out"), for readers that see
        errors of any kind side by side.
    :param from_cause: Read the cause instead, when it has a message: wrappers (Haystack's, Hydra's)
        raise their own error with the useful one as its cause.
    """
    cause = exc.__cause__
    if from_cause and cause is not None and str(cause).strip():
        exc = cause
    found = [line.strip() for line in masked(str(exc)).splitlines() if line.strip()][:lines]
    if not found:
        return type(exc).__name__
    message = " ".join(found)
    return f"{type(exc).__name__}: {message}" if typed else message


@dataclass(frozen=True)
class ComponentFailure:
    """
    A component run that failed, returned as the component's `failure` output instead of raised
    (its `raise_on_failure=False`): what it produced before the error travels by name in
    `outputs` (FallbackRetriever: the `retrieval_trace` of the attempts that ran). The component
    sends none of its other outputs, so nothing after it runs on them.
    """

    error: Exception
    outputs: dict[str, Any] = field(default_factory=dict)


def failed_component(pipeline_outputs: dict[str, Any]) -> tuple[str, ComponentFailure] | None:
    """The component of a pipeline run that returned a `failure` output, and the failure (None: none did)."""
    for name, outputs in pipeline_outputs.items():
        failure = outputs.get("failure") if isinstance(outputs, dict) else None
        if isinstance(failure, ComponentFailure):
            return name, failure
    return None
