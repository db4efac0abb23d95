"""
The MCP server of `knowledge serve --mcp`: two tools, `lookup_knowledge` and
`lookup_knowledge_feedback`, and nothing else (no hayhooks status or deploy tools). Their
arguments are checked here, so a bad call is a tool error that says what is wrong; a lookup's
result is the agent view by default (`view: "full"` for everything).
"""

import functools
import json
from typing import Any

from pipelines.serving.agent_tool import TOOL_NAME, TOOL_PARAMETERS, tool_description
from pipelines.serving.views import FULL_VIEW_KEYS, VIEWS, agent_view, described

MCP_DEFAULT_VIEW = "agent"
MCP_TOOL_SCHEMA: dict[str, Any] = {
    **TOOL_PARAMETERS,
    "properties": {
        **TOOL_PARAMETERS["properties"],
        "view": {
            "type": "string",
            "enum": list(VIEWS),
            "default": MCP_DEFAULT_VIEW,
            "description": "agent (default): the packed context with citations; full: every trace too.",
        },
    },
}
# The default view's keys, then the full view's for view=full.
MCP_TOOL_DESCRIPTION = (
    f"{tool_description(MCP_DEFAULT_VIEW)} With view=full the result is the whole record instead, with the keys: "
    f"{described(FULL_VIEW_KEYS)}."
)


FEEDBACK_TOOL_NAME = f"{TOOL_NAME}_feedback"
FEEDBACK_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invocationId": {"type": "string", "description": "The invocationId of the lookup's result."},
        "useful": {"type": "boolean", "description": "Whether the answer (or the named source) helped."},
        "source": {
            "type": "string",
            "description": "The source that helped (or did not), as cited; default: the lookup's best source.",
        },
    },
    "required": ["invocationId", "useful"],
}
FEEDBACK_TOOL_DESCRIPTION = (
    f"After using a {TOOL_NAME} result, say whether it helped: useful=true (optionally the source that "
    "did), or useful=false. Reviewers turn this feedback into evaluation sets."
)


class ToolCallRefused(ValueError):
    """Arguments of a tool call that cannot be looked up: the message is the reason the agent sees."""


def check_arguments(arguments: dict[str, Any] | None) -> tuple[str, str]:
    """(query, view) of a `lookup_knowledge` call, or `ToolCallRefused` with the reason."""
    arguments = arguments or {}
    unknown = sorted(set(arguments) - set(MCP_TOOL_SCHEMA["properties"]))
    if unknown:
        raise ToolCallRefused(f"unknown argument(s) {', '.join(unknown)}; the arguments are query and view")
    if "query" not in arguments:
        raise ToolCallRefused("query is missing: give the question or alert text to look up")
    query, view = arguments["query"], arguments.get("view", MCP_DEFAULT_VIEW)
    if not isinstance(query, str):
        raise ToolCallRefused(f"query must be a string, not {type(query).__name__}")
    if view not in VIEWS:
        raise ToolCallRefused(f"view must be one of {', '.join(VIEWS)}, not {view!r}")
    return query, view


def check_feedback_arguments(arguments: dict[str, Any] | None) -> tuple[str, bool, str | None]:
    """(invocationId, useful, source) of a `lookup_knowledge_feedback` call, or `ToolCallRefused`."""
    arguments = arguments or {}
    unknown = sorted(set(arguments) - set(FEEDBACK_TOOL_SCHEMA["properties"]))
    if unknown:
        raise ToolCallRefused(
            f"unknown argument(s) {', '.join(unknown)}; the arguments are invocationId, useful, source"
        )
    invocation_id, useful, source = arguments.get("invocationId"), arguments.get("useful"), arguments.get("source")
    if not isinstance(invocation_id, str) or not invocation_id:
        raise ToolCallRefused("invocationId is missing: give the invocationId of the lookup's result")
    if not isinstance(useful, bool):
        raise ToolCallRefused("useful must be true or false")
    if source is not None and not isinstance(source, str):
        raise ToolCallRefused(f"source must be a string, not {type(source).__name__}")
    return invocation_id, useful, source


def create_lookup_mcp_server(service, max_concurrent: int | None = None):
    """An MCP `Server` offering `lookup_knowledge` and its feedback tool on `service`, at most `max_concurrent` lookups at once."""
    import anyio
    from mcp.server import Server
    from mcp.types import TextContent, Tool

    from components.contracts import STATUS_ERROR
    from pipelines.serving.bind import lookup_slots

    server = Server("lookup-knowledge")
    tools = [
        Tool(name=TOOL_NAME, description=MCP_TOOL_DESCRIPTION, inputSchema=MCP_TOOL_SCHEMA),
        Tool(name=FEEDBACK_TOOL_NAME, description=FEEDBACK_TOOL_DESCRIPTION, inputSchema=FEEDBACK_TOOL_SCHEMA),
    ]
    limiter = anyio.CapacityLimiter(lookup_slots(max_concurrent))

    @server.list_tools()
    async def list_tools() -> list[Tool]:
        return tools

    # The arguments are checked by `check_arguments`: its reasons are clearer than a schema error.
    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> list[TextContent]:
        if name == FEEDBACK_TOOL_NAME:
            return await _feedback(service, arguments)
        if name != TOOL_NAME:
            raise ToolCallRefused(f"no tool {name!r}: the tools are {TOOL_NAME} and {FEEDBACK_TOOL_NAME}")
        query, view = check_arguments(arguments)
        # An empty query raises InvalidQueryError (after its trace row): its message is the tool error.
        result = await anyio.to_thread.run_sync(functools.partial(service.lookup, query), limiter=limiter)
        body = result.to_dict()
        if result.evidence_status == STATUS_ERROR:
            raise RuntimeError(f"{result.message} (invocation {result.invocation_id})")
        shown = agent_view(body) if view == "agent" else body
        return [TextContent(type="text", text=json.dumps(shown, ensure_ascii=False))]

    return server


async def _feedback(service, arguments: dict[str, Any] | None) -> list:
    """One feedback call: its label, described as JSON; an unknown id or source is a tool error with the reason."""
    import anyio
    from mcp.types import TextContent

    from pipelines.serving.feedback import give_feedback

    invocation_id, useful, source = check_feedback_arguments(arguments)
    call = functools.partial(give_feedback, service, invocation_id, useful, source, "mcp")
    return [TextContent(type="text", text=json.dumps(await anyio.to_thread.run_sync(call), ensure_ascii=False))]
