"""
The explicit `lookup_knowledge` tool for Haystack Agents.

The agent decides when to call it, with one argument: the query. Nothing injects knowledge into
chat responses implicitly; the tool returns the evidence-first result dict (DESIGN.md).

Usage example:

```python
from haystack.components.agents import Agent

service = LookupService(load_config())
agent = Agent(chat_generator=my_chat_generator, tools=[lookup_knowledge_tool(service)])
agent.run(messages=[ChatMessage.from_user("disk almost full on a worker node")])
```
"""

from typing import Any

from haystack.tools import Tool

from pipelines.lookup import LookupService

TOOL_NAME = "lookup_knowledge"
TOOL_DESCRIPTION = (
    "Look up the operations knowledge base (runbooks) for a question or alert text. Returns "
    "structured evidence: found, evidenceBlocks (source, title, breadcrumb, content, hitReasons), "
    "a contextPack to quote from, and retrieval traces. found=false means the knowledge base holds "
    "no evidence for the query: do not answer from it then."
)
TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "The question or alert text to look up, in the user's words.",
        }
    },
    "required": ["query"],
    "additionalProperties": False,
}


# `view`: `full` is the whole result (REST and CLI default); `agent` is what an agent quotes from.
VIEWS = ("full", "agent")
# The keys of the agent view, taken as they are from the full result.
_AGENT_KEYS = ("found", "evidenceStatus", "message", "relevanceLevel", "completenessHint")
# The keys of one citation: where a packed block comes from and how strongly it matched.
_CITATION_KEYS = ("source", "title", "breadcrumb", "score", "scoreLabel")


def agent_view(result: dict[str, Any]) -> dict[str, Any]:
    """
    The slim result for an agent (`view=agent`): the decision, the packed context to quote and one
    citation per evidence block, without the retrieval and rerank traces or a second copy of the
    evidence text. The trace row of the call keeps everything.

    Usage example:

    ```python
    agent_view(service.lookup("disk almost full").to_dict())["context"]  # the text to quote
    ```
    """
    view = {key: result[key] for key in _AGENT_KEYS if key in result}
    pack = result.get("contextPack") or {}
    view["context"] = pack.get("text", "")
    view["citations"] = [
        {key: block[key] for key in _CITATION_KEYS if block.get(key) is not None}
        for block in result.get("evidenceBlocks") or []
    ]
    if pack.get("truncated"):
        view["contextTruncated"] = True
    if "error" in result:
        view["error"] = result["error"]
    view["invocationId"] = result.get("invocationId")
    return view


def lookup_knowledge_tool(service: LookupService, view: str = "agent") -> Tool:
    """
    `lookup_knowledge` as a Haystack `Tool`: one required string parameter, `query`, answered by
    `service.lookup(query)`; the tool result is the result as `view` shows it: `agent` (default,
    the packed context and citations, as `knowledge lookup --view agent`) or `full` (`LookupResult.to_dict()`).

    An invalid query (empty) raises `InvalidQueryError`, which an Agent reports to the model as
    a failed tool call.
    """
    if view not in VIEWS:
        raise ValueError(f"view={view!r} is not one of {', '.join(VIEWS)}")

    def lookup_knowledge(query: str) -> dict[str, Any]:
        return shown(service.lookup(query).to_dict(), view)

    return Tool(
        name=TOOL_NAME,
        description=TOOL_DESCRIPTION,
        parameters=TOOL_PARAMETERS,
        function=lookup_knowledge,
    )


def shown(result: dict[str, Any], view: str) -> dict[str, Any]:
    """The result as a view shows it: the full result, or the agent view (packed context and citations)."""
    return result if view == "full" else agent_view(result)
