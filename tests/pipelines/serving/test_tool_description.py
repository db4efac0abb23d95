"""The tool descriptions (Haystack and MCP) name exactly the keys of the result their view returns."""

import re

import pytest

from pipelines.serving.agent_tool import lookup_knowledge_tool
from pipelines.serving.mcp_tool import MCP_TOOL_DESCRIPTION
from pipelines.serving.views import AGENT_VIEW_KEYS, FULL_VIEW_KEYS

FOUND, NOT_FOUND = "disk almost full on a worker node", "how long to proof sourdough bread"
# Keys a result holds only in some cases: a budget cut, a failed call, a competing document, the sidecar on.
SOMETIMES = {"contextTruncated", "error", "competition", "sidecar"}
KEY_LIST = re.compile(r"with the keys: ((?:\w+ \([^()]*\)(?:, )?)+)")


def described_keys(description: str) -> list[list[str]]:
    """The keys each `with the keys: key (what it holds), ...` list of a description names, list by list."""
    return [re.findall(r"(\w+) \(", found) for found in KEY_LIST.findall(description)]


@pytest.mark.parametrize("view", ["agent", "full"])
def test_the_tool_description_names_exactly_the_keys_of_a_real_result(sample_service, view):
    tool = lookup_knowledge_tool(sample_service, view=view)
    [keys] = described_keys(tool.description)
    results = [tool.invoke(query=query) for query in (FOUND, NOT_FOUND)]
    assert [r["found"] for r in results] == [True, False]
    seen = set().union(*results)
    assert seen <= set(keys), f"returned but not described: {seen - set(keys)}"
    assert set(keys) - SOMETIMES <= seen, f"described but never returned: {set(keys) - SOMETIMES - seen}"
    assert keys == list(AGENT_VIEW_KEYS if view == "agent" else FULL_VIEW_KEYS)


def test_the_mcp_description_names_the_default_view_then_the_full_one():
    assert described_keys(MCP_TOOL_DESCRIPTION) == [list(AGENT_VIEW_KEYS), list(FULL_VIEW_KEYS)]
    assert "evidenceBlocks" not in MCP_TOOL_DESCRIPTION.split("view=full")[0]
