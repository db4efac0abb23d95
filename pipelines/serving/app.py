"""
Building and running the server of `knowledge serve`: REST (`rest_app.py`) or MCP with `--mcp`
(`mcp_app.py`), both through the one `lookup_knowledge` wrapper, behind the Host/Origin guard.
"""

import json
import logging
import os
from typing import Any

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
    resolve_api_key,
)
from pipelines.serving.service import OVERRIDES_ENV, served_config, shared_service

logger = logging.getLogger(__name__)

# uvicorn's protocol with a deadline on request headers (imported by name in each worker process).
HTTP_PROTOCOL = "pipelines.serving.header_deadline:HeaderDeadlineProtocol"


def check_ready(report: dict[str, Any]) -> None:
    """Fail start-up with what to do when the index or the vector store is not there."""
    for name in ("l0Index", "vectorStore"):
        check = report["checks"][name]
        if not check["ok"]:
            raise ServeError(f"cannot serve: {check['detail']}")


def _publish_overrides(overrides: list[str]) -> None:
    """The served config's overrides, where the wrapper's `setup()` and every worker process read them."""
    os.environ[OVERRIDES_ENV] = json.dumps(overrides)


def lookup_wrapper():
    """The `lookup_knowledge` wrapper of this process, set up on its warmed service: every route and tool calls it."""
    from pipelines.serving.wrappers.lookup_knowledge.pipeline_wrapper import PipelineWrapper

    wrapper = PipelineWrapper()
    wrapper.setup()
    return wrapper


def build_app(cfg: DictConfig, mcp: bool = False):
    """The served app of one process: its warmed LookupService, health and guard."""
    from pipelines.serving.header_deadline import HeaderDeadlineProtocol
    from pipelines.serving.health import HealthCheck

    HeaderDeadlineProtocol.timeout_s = float(cfg.serve.read_timeout_s)  # this process's connections

    api_key = resolve_api_key(cfg)
    health = HealthCheck(cfg, trace_store=None, auth=api_key is not None, timeout_s=cfg.serve.health_timeout_s)
    service = shared_service(cfg)  # the wrapper's setup() gets this same warmed service
    health.trace_store = service.trace_writer.store if service.trace_writer else None
    wrapper = lookup_wrapper()
    if mcp:
        from pipelines.serving.mcp_app import build_mcp_app

        return with_origin_guard(build_mcp_app(cfg, wrapper, health, api_key), cfg)
    from pipelines.serving.rest_app import build_rest_app

    return with_origin_guard(build_rest_app(cfg, wrapper, health, api_key), cfg)


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
    return build_app(cfg if cfg is not None else served_config(), mcp=False)


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
    _publish_overrides(overrides)
    check_ready(HealthCheck(cfg, trace_store=None, auth=False).report())  # before the model loads: fails in a second
    kind = "MCP (streamable HTTP /mcp, SSE /sse)" if mcp else f"REST (POST /{TOOL_NAME}/run)"
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
