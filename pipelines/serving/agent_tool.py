"""
The explicit `lookup_knowledge` tool for Haystack Agents.

The agent decides when to call it, with one argument: the query. Nothing injects knowledge into
chat responses implicitly; the tool returns the evidence-first result dict (docs/architecture.md, "The result").

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
from pipelines.serving.views import AGENT_VIEW_KEYS, FULL_VIEW_KEYS, VIEWS, described, shown

TOOL_NAME = "lookup_knowledge"
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


def tool_description(view: str = "agent") -> str:
    """What the tool does and exactly which keys the result of `view` holds (pipelines/serving/views.py)."""
    keys = AGENT_VIEW_KEYS if view == "agent" else FULL_VIEW_KEYS
    return (
        "Look up the operations knowledge base (runbooks) for a question or alert text. Returns a JSON "
        f"object with the keys: {described(keys)}. found=false means the knowledge base holds no evidence "
        "for the query: do not answer from it then."
    )


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
        description=tool_description(view),
        parameters=TOOL_PARAMETERS,
        function=lookup_knowledge,
    )
