"""
Building and running the server of `knowledge serve`: hayhooks REST (or MCP with `--mcp`) around
the `lookup_knowledge` wrapper, behind `RequestGuard`, with `GET /health`.
"""

import functools
import json
import logging
import os
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig

from pipelines.serving.agent_tool import TOOL_NAME
from pipelines.serving.bind import (
    ServeError,
    allowed_origins,
    check_allow_lists,
    check_bind,
    check_cors,
    check_port_free,
    check_workers,
    cors_allowed,
    lookup_slots,
    resolve_api_key,
)
from pipelines.serving.docs_page import serve_docs_locally
from pipelines.serving.service import OVERRIDES_ENV, overrides_from_env, served_config, shared_service
from pipelines.serving.views import agent_view

logger = logging.getLogger(__name__)

WRAPPERS_DIR = Path(__file__).resolve().parent / "wrappers"
RUN_PATH = f"/{TOOL_NAME}/run"
FEEDBACK_PATH = f"/{TOOL_NAME}/feedback"
# hayhooks routes a lookup server does not offer: deploying code into the process, and routes that
# cannot work for this wrapper (drawing and ReDoc need the internet; it has no chat, responses or files API).
UNSERVED_PREFIXES = (
    "/deploy",
    "/undeploy",
    "/draw",
    "/redoc",
    "/v1",
    "/models",
    "/chat",
    "/responses",
    "/files",
    "/traces",
)
# uvicorn's protocol with a deadline on request headers (imported by name in each worker process).
HTTP_PROTOCOL = "pipelines.serving.header_deadline:HeaderDeadlineProtocol"
# The error codes of HTTP errors raised with a text detail (the routing's own, hayhooks').
HTTP_ERROR_CODES = {404: "not_found", 405: "method_not_allowed"}
# What OpenAPI lists: the routes that answer.
SERVED_PATHS = (RUN_PATH, FEEDBACK_PATH, "/health", "/status", "/status/{pipeline_name}")


def check_ready(report: dict[str, Any]) -> None:
    """Fail start-up with what to do when the index or the vector store is not there."""
    for name in ("l0Index", "vectorStore"):
        check = report["checks"][name]
        if not check["ok"]:
            raise ServeError(f"cannot serve: {check['detail']}")


def _configure_hayhooks(cfg: DictConfig, overrides: list[str]) -> None:
    os.environ[OVERRIDES_ENV] = json.dumps(overrides)
    from hayhooks.settings import settings

    # No start-up deployment from a folder: the app deploys its one wrapper itself (`_deploy_run_route`),
    # so that the route answers the result itself rather than hayhooks' `{"result": ...}` envelope.
    settings.pipelines_dir = ""
    settings.show_tracebacks = False
    # hayhooks grants every origin by default (`*`), which lets any web page the user opens read the
    # lookups of a local server: grant only the configured allow-list (none by default).
    settings.cors_allow_origins = cors_allowed(list(cfg.serve.cors_origins))
    settings.cors_allow_methods = ["GET", "POST"]
    settings.cors_allow_headers = ["Authorization", "Content-Type"]


def _health_route(health):
    import anyio
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    # Threads of its own: a health request never waits for a slot behind lookups or other requests.
    limiter = anyio.CapacityLimiter(4)

    async def health_endpoint(request: Request) -> JSONResponse:
        report = await anyio.to_thread.run_sync(health.report, limiter=limiter)
        return JSONResponse(report, status_code=200 if report["status"] == "ok" else 503)

    return health_endpoint


def build_rest_app(cfg: DictConfig, health, api_key: str | None):
    """hayhooks' FastAPI app with the wrapper deployed at start-up, `/health`, and the guard in front."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from hayhooks import create_app
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from pipelines.serving.guard import RequestGuard

    app = create_app()
    app.add_api_route("/health", _health_route(health), methods=["GET"], tags=["status"], include_in_schema=True)
    _deploy_run_route(app, _load_wrapper(), cfg.serve.max_concurrent_lookups)
    _deploy_feedback_route(app, shared_service(cfg))

    @app.exception_handler(RequestValidationError)
    async def documented_validation_error(_request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own shape echoes the input back; answer the documented one with the first reason.
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part not in ("body", "query"))
        detail = f"{where}: {first.get('msg', 'invalid request')}" if where else first.get("msg", "invalid request")
        return JSONResponse({"error": "invalid_request", "detail": detail}, status_code=422)

    app.add_exception_handler(StarletteHTTPException, structured_http_error)
    _list_only_served_routes(app)
    serve_docs_locally(app)
    return RequestGuard(
        app,
        api_key=api_key,
        max_body_bytes=cfg.serve.max_body_bytes,
        validated_paths=(RUN_PATH,),
        blocked_prefixes=UNSERVED_PREFIXES,
        read_timeout_s=cfg.serve.read_timeout_s,
    )


async def structured_http_error(request, exc):
    """
    An HTTP error as JSON of the one documented shape, `{"error": code, "detail": reason}`: the
    routing's own 404 and 405 (FastAPI's `{"detail": ...}`, Starlette's plain text) and hayhooks'
    (`/status/NAME` of no pipeline) alike. The wrapper raises with a dict: the refusal reason, or
    the failed lookup's result, answered as it is.
    """
    from starlette.responses import JSONResponse

    if isinstance(exc.detail, dict):
        body = exc.detail
    elif exc.status_code == 404 and exc.detail == "Not Found":  # no route: say which path
        body = {"error": "not_found", "detail": f"{request.url.path} is not served here"}
    else:
        body = {"error": HTTP_ERROR_CODES.get(exc.status_code, "http_error"), "detail": str(exc.detail)}
    return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


def _list_only_served_routes(app) -> None:
    """OpenAPI without hayhooks' routes the guard answers 404 for (client generators would offer them)."""
    full_schema = app.openapi

    def served_schema() -> dict[str, Any]:
        schema = full_schema()
        schema["paths"] = {path: item for path, item in schema["paths"].items() if path in SERVED_PATHS}
        return schema

    app.openapi = served_schema


def _deploy_run_route(app, wrapper, max_concurrent: int | None = None) -> None:
    """
    `POST /lookup_knowledge/run` answering exactly the JSON of `knowledge lookup` (no envelope),
    typed in OpenAPI by the wrapper's request model and `LookupResponse`; the wrapper is registered
    with hayhooks as its start-up deployment would (`/status` lists it). At most `max_concurrent`
    lookups run at once (`lookup_limiter`); the others wait for a free slot.
    """
    import anyio
    from fastapi import Query
    from fastapi.responses import JSONResponse
    from hayhooks.server.pipelines.models import create_pipeline_metadata
    from hayhooks.server.pipelines.registry import registry

    from pipelines.serving.models import LookupResponse

    metadata = create_pipeline_metadata(TOOL_NAME, wrapper)
    request_model = metadata["request_model"]
    if TOOL_NAME not in registry.get_names():
        registry.add(TOOL_NAME, wrapper, metadata={**metadata, "response_model": LookupResponse})

    limiter = lookup_limiter(max_concurrent)

    async def run_lookup(
        run_request: request_model,  # type: ignore[valid-type]
        view: Literal["full", "agent"] = Query("full", description="full result, or `agent`: context + citations"),
    ) -> LookupResponse:
        # The pipeline is synchronous: it runs in a worker thread, at most `max_concurrent` at once.
        call = functools.partial(wrapper.run_api, **run_request.model_dump())
        result = await anyio.to_thread.run_sync(call, limiter=limiter)
        if view == "agent":
            return JSONResponse(agent_view(result.model_dump()))
        return result

    app.add_api_route(
        RUN_PATH,
        run_lookup,
        methods=["POST"],
        name=f"{TOOL_NAME}_run",
        response_model=LookupResponse,
        tags=["pipelines"],
        description=metadata["description"] or None,
        responses={422: {"description": "A refused request: {error, detail}"}, 503: {"model": LookupResponse}},
    )


def _deploy_feedback_route(app, service) -> None:
    """
    `POST /lookup_knowledge/feedback`: an agent's verdict on a lookup it made becomes a label
    (404 for an unknown invocationId, 422 for a bad body or a source not in the index).
    """
    import anyio
    from fastapi import HTTPException

    from pipelines.labels.record import UnknownInvocationError
    from pipelines.serving.feedback import give_feedback
    from pipelines.serving.models import FeedbackRequest, FeedbackResponse

    # Threads of its own: a label never waits for a lookup slot.
    limiter = anyio.CapacityLimiter(2)

    async def feedback(request: FeedbackRequest) -> FeedbackResponse:
        call = functools.partial(give_feedback, service, request.invocationId, request.useful, request.source, "rest")
        try:
            return FeedbackResponse(**await anyio.to_thread.run_sync(call, limiter=limiter))
        except UnknownInvocationError as exc:
            raise HTTPException(404, detail={"error": "unknown_invocation", "detail": str(exc)}) from exc
        except ValueError as exc:  # a bad label (a source not in the index): the reason is the detail
            raise HTTPException(422, detail={"error": "invalid_feedback", "detail": str(exc)}) from exc

    app.add_api_route(
        FEEDBACK_PATH,
        feedback,
        methods=["POST"],
        name=f"{TOOL_NAME}_feedback",
        response_model=FeedbackResponse,
        tags=["pipelines"],
        description="Tell whether a lookup's answer (or one of its sources) helped: it becomes a label.",
        responses={404: {"description": "No such invocation"}, 422: {"description": "A refused request"}},
    )


def lookup_limiter(max_concurrent: int | None):
    """
    A limiter of `lookup_slots` pipeline threads. More pipeline threads than cores only fight over
    them (torch's threads and the GIL): fewer requests per second and a longer tail (docs/serving.md).
    """
    import anyio

    return anyio.CapacityLimiter(lookup_slots(max_concurrent))


def _load_wrapper():
    """The wrapper loaded the way hayhooks deploys it (setup run, capability flags set)."""
    from hayhooks.server.utils.module_loader import create_pipeline_wrapper_instance, load_pipeline_module

    return create_pipeline_wrapper_instance(load_pipeline_module(TOOL_NAME, WRAPPERS_DIR / TOOL_NAME))


def build_mcp_app(cfg: DictConfig, health, api_key: str | None):
    """
    The MCP app (streamable HTTP at `/mcp`, SSE at `/sse`, hayhooks' transports) serving the one
    tool of `pipelines/serving/mcp_tool.py`: no hayhooks status or deploy tools.
    """
    from hayhooks.server.utils.mcp_utils import create_starlette_app
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from pipelines.serving.guard import RequestGuard
    from pipelines.serving.mcp_tool import create_lookup_mcp_server

    server = create_lookup_mcp_server(shared_service(cfg), cfg.serve.max_concurrent_lookups)
    app = create_starlette_app(server)
    app.add_route("/health", _health_route(health), methods=["GET"])
    app.add_exception_handler(StarletteHTTPException, structured_http_error)
    origins = cors_allowed(list(cfg.serve.cors_origins))
    if origins:  # hayhooks' MCP app grants no origin; the allow-list applies to it as to REST
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


def build_app(cfg: DictConfig, mcp: bool = False):
    """The served app of one process: its warmed LookupService, health and guard."""
    from pipelines.serving.header_deadline import HeaderDeadlineProtocol
    from pipelines.serving.health import HealthCheck

    HeaderDeadlineProtocol.timeout_s = float(cfg.serve.read_timeout_s)  # this process's connections

    api_key = resolve_api_key(cfg)
    health = HealthCheck(cfg, trace_store=None, auth=api_key is not None, timeout_s=cfg.serve.health_timeout_s)
    service = shared_service(cfg)  # the wrapper's setup() gets this same warmed service
    health.trace_store = service.trace_writer.store if service.trace_writer else None
    app = build_mcp_app(cfg, health, api_key) if mcp else build_rest_app(cfg, health, api_key)
    return with_origin_guard(app, cfg)


def with_origin_guard(app, cfg: DictConfig):
    """The `Host` and `Origin` allow-lists in front of everything else (`origin_guard.py`)."""
    from pipelines.serving.origin_guard import OriginGuard

    return OriginGuard(
        app, allowed_hosts=cfg.serve.allowed_hosts, allowed_origins=allowed_origins(cfg), bound_host=cfg.serve.host
    )


def worker_app(cfg: DictConfig | None = None):
    """
    The app of one uvicorn worker process of `knowledge serve --workers N` (started through
    `pipelines.serving.worker`): the config comes from the parent's overrides in `KNOWLEDGE_SERVE_OVERRIDES`.
    """
    overrides = overrides_from_env()
    cfg = cfg if cfg is not None else served_config()
    _configure_hayhooks(cfg, overrides)
    return build_app(cfg, mcp=False)


def serve(cfg: DictConfig, overrides: list[str], host: str, port: int, mcp: bool = False, workers: int = 1) -> None:
    """Check, warm, then serve until interrupted. Raises `ServeError` before binding when it must not start."""
    import uvicorn

    from pipelines.serving.health import HealthCheck

    api_key = resolve_api_key(cfg)
    check_bind(host, api_key)
    check_cors(list(cfg.serve.cors_origins), api_key)
    check_allow_lists(cfg)
    check_workers(cfg, workers, mcp)
    check_port_free(host, port)
    _configure_hayhooks(cfg, overrides)
    check_ready(HealthCheck(cfg, trace_store=None, auth=False).report())  # before the model loads: fails in a second
    kind = "MCP (streamable HTTP /mcp, SSE /sse)" if mcp else f"REST (POST {RUN_PATH})"
    logger.warning(
        "lookup_knowledge %s on http://%s:%d (auth %s, %d worker(s))",
        kind,
        host,
        port,
        "on" if api_key else "off",
        workers,
    )
    if workers == 1:
        uvicorn.run(
            build_app(cfg, mcp),
            host=host,
            port=port,
            log_level="warning",
            log_config=masked_log_config(),
            access_log=False,
            http=HTTP_PROTOCOL,
        )
        return
    # uvicorn binds the port once and hands it to N spawned processes; each builds and warms its own
    # service from the overrides in the environment, and they share the Milvus server and trace database.
    uvicorn.run(
        "pipelines.serving.worker:worker_app",
        factory=True,
        workers=workers,
        http=HTTP_PROTOCOL,
        host=host,
        port=port,
        log_level="warning",
        log_config=masked_log_config(),
        access_log=False,
    )


def masked_log_config() -> dict[str, Any]:
    """uvicorn's logging config with secrets masked in whatever its handlers write (an app's traceback included)."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"masked": {"()": "components.common.masking.MaskingFilter"}}
    for handler in config["handlers"].values():
        handler["filters"] = ["masked"]
    return config
