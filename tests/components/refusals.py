"""What every component test checks of its init parameters: one out of its bound is refused by name."""

from collections.abc import Callable
from typing import Any

import pytest

from components.errors import ParameterError


def assert_refused(build: Callable[..., Any], parameter: str, value: Any, rule: str) -> None:
    """`build(**{parameter: value})` raises a one-line ParameterError naming `parameter` and its rule."""
    with pytest.raises(ParameterError) as error:
        build(**{parameter: value})
    message = str(error.value)
    assert error.value.parameter.split(".")[0] == parameter, message
    assert message.startswith(f"{error.value.parameter}=") and rule in message and "\n" not in message
