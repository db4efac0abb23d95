"""
The usage example in the docstring of every component runs as written (doctest): a module with a
Haystack component under components/ that has no runnable example fails here.
"""

import doctest
import importlib

import pytest

from tests.helpers import REPO

# Every module of components/ that defines a Haystack component (`@component` on a class).
MODULES = sorted(
    ".".join(path.relative_to(REPO).with_suffix("").parts)
    for path in (REPO / "components").rglob("*.py")
    if "\n@component\nclass " in path.read_text(encoding="utf-8")
)


def test_every_component_module_is_collected():
    assert len(MODULES) >= 17 and "components.lookup.fallback_retriever" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_the_usage_example_runs(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an example writes only to its temp folders; nothing lands in the repo
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name}: its component's usage example is no doctest"
    assert result.failed == 0
