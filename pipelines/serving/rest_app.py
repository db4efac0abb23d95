"""
The REST app of `knowledge serve`: a FastAPI app of its own around the `lookup_knowledge` wrapper
(the run and feedback routes), `/health`, `/status`, `/openapi.json` and `/docs`, behind the
request guard. It serves nothing else: no route to deploy code, no chat or drawing routes.
"""

import functools
import inspect
import re
from typing import Any, Literal

from omegaconf import DictConfig

from pipelines.serving.agent_tool import TOOL_NAME
from pipelines.serving.bind import cors_allowed, lookup_slots
from pipelines.serving.docs_page import serve_docs_locally
from pipelines.serving.guard import RequestGuard
from pipelines.serving.health import health_route
from pipelines.serving.http_errors import documented_validation_error, structured_http_error

RUN_PATH = f"/{TOOL_NAME}/run"
FEEDBACK_PATH = f"/{TOOL_NAME}/feedback"
STATUS_UP = "Up!"
_PARAM_DOC = re.compile(r"^:param (\w+): (.+)$", re.MULTILINE)


def build_rest_app(cfg: DictConfig, wrapper, health, api_key: str | None) -> RequestGuard:
    """The FastAPI app serving `wrapper`, with CORS from `serve.cors_origins` and the guard in front."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.middleware.cors import CORSMiddleware

    # ReDoc loads from a CDN and has no packaged copy: not served (`/docs` is, from the server itself).
    app = FastAPI(title="lookup-knowledge", description=run_description(wrapper), redoc_url=None)
    # No origin is granted unless configured: a web page the user opens must not read a local server's lookups.
    app.add_middleware(
        CORSMiddleware,
        allow_origins=cors_allowed(list(cfg.serve.cors_origins)),
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type"],
    )
    app.add_api_route("/health", health_route(health), methods=["GET"], tags=["status"])
    _add_status_routes(app)
    _add_run_route(app, wrapper, cfg.serve.max_concurrent_lookups)
    _add_feedback_route(app, wrapper)
    app.add_exception_handler(RequestValidationError, documented_validation_error)
    app.add_exception_handler(StarletteHTTPException, structured_http_error)
    serve_docs_locally(app)
    return RequestGuard(
        app,
        api_key=api_key,
        max_body_bytes=cfg.serve.max_body_bytes,
        validated_paths=(RUN_PATH,),
        read_timeout_s=cfg.serve.read_timeout_s,
    )


def run_description(wrapper) -> str:
    """The first paragraph of `run_api`'s docstring: what a lookup does, for OpenAPI."""
    return (inspect.getdoc(wrapper.run_api) or "").split("\n\n", 1)[0]


def run_request_model(wrapper):
    """
    The request body of `POST /lookup_knowledge/run`, made from `run_api`'s signature as hayhooks
    makes it: one field per parameter (its annotation, its default, its `:param:` line), named
    `lookup_knowledgeRunRequest`.
    """
    from pydantic import Field, create_model

    described = dict(_PARAM_DOC.findall(inspect.getdoc(wrapper.run_api) or ""))
    fields: dict[str, Any] = {
        name: (
            parameter.annotation,
            Field(... if parameter.default is parameter.empty else parameter.default, description=described.get(name)),
        )
        for name, parameter in inspect.signature(wrapper.run_api, eval_str=True).parameters.items()
    }
    return create_model(f"{TOOL_NAME}RunRequest", **fields)


def _add_run_route(app, wrapper, max_concurrent: int | None = None) -> None:
    """
    `POST /lookup_knowledge/run` answering exactly the JSON of `knowledge lookup` (no envelope),
    typed in OpenAPI by `run_api`'s request model and `LookupResponse`. At most `max_concurrent`
    lookups run at once (`lookup_limiter`); the others wait for a free slot.
    """
    import anyio
    from fastapi import Query
    from fastapi.responses import JSONResponse

    from pipelines.serving.models import LookupResponse

    request_model = run_request_model(wrapper)
    limiter = lookup_limiter(max_concurrent)

    async def run_lookup(
        run_request: request_model,  # type: ignore[valid-type]
        view: Literal["full", "agent"] = Query("full", description="full result, or `agent`: context + citations"),
    ) -> LookupResponse:
        # The pipeline is synchronous: it runs in a worker thread, at most `max_concurrent` at once.
        call = functools.partial(wrapper.run_api, **run_request.model_dump())
        result = await anyio.to_thread.run_sync(call, limiter=limiter)
        if view == "agent":
            return JSONResponse(result.shown(view))
        return result

    app.add_api_route(
        RUN_PATH,
        run_lookup,
        methods=["POST"],
        name=f"{TOOL_NAME}_run",
        response_model=LookupResponse,
        tags=["pipelines"],
        description=run_description(wrapper) or None,
        responses={422: {"description": "A refused request: {error, detail}"}, 503: {"model": LookupResponse}},
    )


def _add_feedback_route(app, wrapper) -> None:
    """
    `POST /lookup_knowledge/feedback`: an agent's verdict on a lookup it made becomes a label
    (404 for an unknown invocationId, 422 for a bad body or a source not in the index).
    """
    import anyio

    from pipelines.serving.models import FeedbackRequest, FeedbackResponse

    # Threads of its own: a label never waits for a lookup slot.
    limiter = anyio.CapacityLimiter(2)

    async def feedback(request: FeedbackRequest) -> FeedbackResponse:
        call = functools.partial(wrapper.feedback, request.invocationId, request.useful, request.source, "rest")
        return await anyio.to_thread.run_sync(call, limiter=limiter)

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


def _add_status_routes(app) -> None:
    """`GET /status` and `GET /status/{pipeline_name}`: the server is up and serves `lookup_knowledge`."""
    from fastapi import HTTPException

    from pipelines.serving.models import PipelineStatusResponse, StatusResponse

    async def status_all() -> StatusResponse:
        return StatusResponse(status=STATUS_UP, pipelines=[TOOL_NAME])

    async def status(pipeline_name: str) -> PipelineStatusResponse:
        if pipeline_name != TOOL_NAME:
            raise HTTPException(404, detail=f"no pipeline '{pipeline_name}': this server serves {TOOL_NAME}")
        return PipelineStatusResponse(status=STATUS_UP, pipeline=pipeline_name)

    app.add_api_route("/status", status_all, methods=["GET"], tags=["status"], response_model=StatusResponse)
    app.add_api_route(
        "/status/{pipeline_name}", status, methods=["GET"], tags=["status"], response_model=PipelineStatusResponse
    )


def lookup_limiter(max_concurrent: int | None):
    """
    A limiter of `lookup_slots` pipeline threads. More pipeline threads than cores only fight over
    them (torch's threads and the GIL): fewer requests per second and a longer tail (docs/serving.md).
    """
    import anyio

    return anyio.CapacityLimiter(lookup_slots(max_concurrent))
