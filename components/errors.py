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

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


class KnowledgeError(Exception):
    """Base of every error lookup-knowledge raises on purpose."""

    exit_code = EXIT_FAILURE


class BadInputError(KnowledgeError, ValueError):
    """The input (query, file, configuration, model, knowledge base) cannot be used as given."""

    exit_code = EXIT_BAD_INPUT


class KnowledgeFailure(KnowledgeError, RuntimeError):
    """Something the input does not explain failed: the vector store, the trace store."""

    exit_code = EXIT_FAILURE


def exit_code_of(exc: BaseException) -> int:
    """2 for bad input, 1 for any other error (also one that is no `KnowledgeError`)."""
    return exc.exit_code if isinstance(exc, KnowledgeError) else EXIT_FAILURE


def first_line(exc: BaseException) -> str:
    """The first nonblank line of an exception's message, or its type name when it has none."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__
