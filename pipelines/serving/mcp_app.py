"""
The MCP app of `knowledge serve --mcp`: the `mcp` SDK's two HTTP transports (streamable HTTP at
`/mcp`, SSE at `/sse` with its `/messages/` posts) around the server of `mcp_tool.py`, plus
`/health` and `/status`, behind the request guard.
"""

from contextlib import asynccontextmanager

from omegaconf import DictConfig

from pipelines.serving.bind import cors_allowed
from pipelines.serving.guard import RequestGuard
from pipelines.serving.health import health_route
from pipelines.serving.http_errors import structured_http_error
from pipelines.serving.mcp_tool import create_lookup_mcp_server

SSE_PATH = "/sse"
SSE_MESSAGES_PATH = "/messages/"


class SseEndpoint:
    """`GET /sse` as a plain ASGI app: one SSE session of `server` per connection."""

    def __init__(self, server, transport) -> None:
        self.server = server
        self.transport = transport

    async def __call__(self, scope, receive, send) -> None:
        async with self.transport.connect_sse(scope, receive, send) as (read_stream, write_stream):
            await self.server.run(read_stream, write_stream, self.server.create_initialization_options())


def transports_app(server, extra_routes: list):
    """A Starlette app serving `server` over streamable HTTP (stateless, as each call is independent) and SSE."""
    from mcp.server.sse import SseServerTransport
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route

    sessions = StreamableHTTPSessionManager(app=server, event_store=None, json_response=False, stateless=True)
    sse = SseServerTransport(SSE_MESSAGES_PATH)

    @asynccontextmanager
    async def lifespan(_app):
        async with sessions.run():
            yield

    routes = [
        Route(SSE_PATH, endpoint=SseEndpoint(server, sse), methods=["GET"]),
        Mount(SSE_MESSAGES_PATH, app=sse.handle_post_message),
        Mount("/mcp", app=sessions.handle_request),
        *extra_routes,
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def build_mcp_app(cfg: DictConfig, wrapper, health, api_key: str | None) -> RequestGuard:
    """The MCP app serving the tools of `mcp_tool.py` on `wrapper`, with `serve.cors_origins` and the guard."""
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def status(_request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    server = create_lookup_mcp_server(wrapper, cfg.serve.max_concurrent_lookups)
    app = transports_app(
        server, [Route("/health", health_route(health), methods=["GET"]), Route("/status", status, methods=["GET"])]
    )
    app.add_exception_handler(StarletteHTTPException, structured_http_error)
    origins = cors_allowed(list(cfg.serve.cors_origins))
    if origins:  # the allow-list applies to MCP as to REST; no origin is granted unless configured
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Mcp-Session-Id", "Mcp-Protocol-Version"],
            expose_headers=["Mcp-Session-Id"],
        )
    return RequestGuard(
        app,
        api_key=api_key,
        max_body_bytes=cfg.serve.max_body_bytes,
        read_timeout_s=cfg.serve.read_timeout_s,
        jsonrpc_prefixes=("/mcp",),
    )
