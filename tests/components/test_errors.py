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
