"""The usage examples in the docstrings of the lookup components run as written (doctest)."""

import doctest
import importlib

import pytest

# The components whose example is a complete doctest (the others need an L0 index or a Milvus store).
MODULES = ["components.lookup.evidence_deduper", "components.lookup.context_packer"]


@pytest.mark.parametrize("name", MODULES)
def test_the_usage_example_runs(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
