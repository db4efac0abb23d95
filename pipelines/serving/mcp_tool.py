"""
The MCP server of `knowledge serve --mcp`: two tools, `lookup_knowledge` and
`lookup_knowledge_feedback`, and nothing else (no status or deploy tools), both answered by the
wrapper the REST routes call. Their arguments are checked here, so a bad call is a tool error that
says what is wrong; a lookup's result is the agent view by default (`view: "full"` for everything).
"""

import functools
import json
from typing import Any

from pipelines.serving.agent_tool import TOOL_NAME, TOOL_PARAMETERS, tool_description
from pipelines.serving.views import FULL_VIEW_KEYS, VIEWS, described

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


def create_lookup_mcp_server(wrapper, max_concurrent: int | None = None):
    """
    An MCP `Server` offering `lookup_knowledge` and its feedback tool through `wrapper` (the REST
    routes' door), at most `max_concurrent` lookups at once.
    """
    import anyio
    from mcp.server import Server
    from mcp.types import TextContent, Tool

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
            invocation_id, useful, source = check_feedback_arguments(arguments)
            label = await through_the_door(functools.partial(wrapper.feedback, invocation_id, useful, source, "mcp"))
            return [TextContent(type="text", text=json.dumps(label.model_dump(mode="json"), ensure_ascii=False))]
        if name != TOOL_NAME:
            raise ToolCallRefused(f"no tool {name!r}: the tools are {TOOL_NAME} and {FEEDBACK_TOOL_NAME}")
        query, view = check_arguments(arguments)
        # An empty query is refused by the service after its trace row: the reason is the tool error.
        result = await through_the_door(functools.partial(wrapper.run_api, query), limiter)
        return [TextContent(type="text", text=json.dumps(result.shown(view), ensure_ascii=False))]

    return server


async def through_the_door(call, limiter=None):
    """
    Run one wrapper call in a worker thread; its HTTP error becomes the tool error an agent reads:
    the refusal's reason, or for a failed lookup its message and the invocation of its trace row.
    """
    import anyio
    from starlette.exceptions import HTTPException

    try:
        return await anyio.to_thread.run_sync(call, limiter=limiter)
    except HTTPException as exc:
        if exc.status_code >= 500:
            failed = exc.detail
            raise RuntimeError(f"{failed['message']} (invocation {failed['invocationId']})") from exc
        raise ToolCallRefused(exc.detail["detail"]) from exc
