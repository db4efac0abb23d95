"""The error hierarchy: which errors are bad input (exit 2), which are failures (exit 1), and their one-line form."""

import pytest

from components.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    BadInputError,
    KnowledgeError,
    KnowledgeFailure,
    exit_code_of,
    first_line,
)


def test_bad_input_exits_2_and_stays_a_value_error():
    error = BadInputError("query is empty")
    assert isinstance(error, KnowledgeError) and isinstance(error, ValueError)
    assert exit_code_of(error) == EXIT_BAD_INPUT == 2


def test_a_failure_exits_1_and_stays_a_runtime_error():
    error = KnowledgeFailure("vector store down")
    assert isinstance(error, KnowledgeError) and isinstance(error, RuntimeError)
    assert exit_code_of(error) == EXIT_FAILURE == 1


@pytest.mark.parametrize("error", [KeyError("x"), OSError("disk"), Exception()])
def test_an_unexpected_error_counts_as_a_failure(error):
    assert exit_code_of(error) == EXIT_FAILURE


def test_first_line_skips_blank_lines_and_falls_back_to_the_type_name():
    assert first_line(ValueError("\n  collection missing  \nrun knowledge index\n")) == "collection missing"
    assert first_line(TimeoutError()) == "TimeoutError"


def test_first_line_keeps_more_lines_on_request_joined_by_a_space():
    error = ValueError("mapping values are not allowed here\n  in '<unicode string>', line 2, column 8\n\nmore")
    assert first_line(error, lines=2) == "mapping values are not allowed here in '<unicode string>', line 2, column 8"


def test_first_line_typed_puts_the_type_name_in_front_but_never_twice():
    assert first_line(ConnectionError("refused\nretrying"), typed=True) == "ConnectionError: refused"
    assert first_line(TimeoutError(), typed=True) == "TimeoutError"


def test_first_line_from_cause_reads_the_wrapped_error_when_it_has_a_message():
    def wrapped(cause: BaseException) -> RuntimeError:
        try:
            raise RuntimeError("Could not load the pipeline") from cause
        except RuntimeError as exc:
            return exc

    assert first_line(wrapped(KeyError("no such component")), from_cause=True) == "'no such component'"
    assert first_line(wrapped(KeyError("no such component"))) == "Could not load the pipeline"
    assert first_line(wrapped(ValueError()), from_cause=True) == "Could not load the pipeline"
