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


def lookup_knowledge_tool(service: LookupService) -> Tool:
    """
    `lookup_knowledge` as a Haystack `Tool`: one required string parameter, `query`, answered by
    `service.lookup(query)`; the tool result is the result dict (`LookupResult.to_dict()`).

    An invalid query (empty) raises `InvalidQueryError`, which an Agent reports to the model as
    a failed tool call.
    """

    def lookup_knowledge(query: str) -> dict[str, Any]:
        return service.lookup(query).to_dict()

    return Tool(
        name=TOOL_NAME,
        description=TOOL_DESCRIPTION,
        parameters=TOOL_PARAMETERS,
        function=lookup_knowledge,
    )
