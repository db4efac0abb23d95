"""Where a server may bind, with which key, how many workers and lookups at once: checked before any heavy import or bind."""

import ipaddress
import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from components.errors import BadInputError

if TYPE_CHECKING:  # the `knowledge lookup --url` client reads API_KEY_ENV here: no config or Milvus imports
    from omegaconf import DictConfig

API_KEY_ENV = "KNOWLEDGE_API_KEY"


class ServeError(BadInputError):
    """A server that must not or cannot start (CLI exit status 2)."""


def resolve_api_key(cfg: "DictConfig") -> str | None:
    """
    The API key: `KNOWLEDGE_API_KEY`, else `serve.api_key`; None when neither is set. A key of
    only whitespace counts as none (it would guard nothing), so off loopback it is refused as such.
    """
    key = os.environ.get(API_KEY_ENV) or cfg.serve.api_key
    return key.strip() if key and key.strip() else None


def check_port_free(host: str, port: int) -> None:
    """Refuse a port another process holds, before anything loads (uvicorn would say so only after)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no obstacle
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ServeError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from exc


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to serve beyond loopback without an API key."""
    if not is_loopback(host) and not api_key:
        raise ServeError(
            f"refusing to serve on {host} without an API key: set {API_KEY_ENV} or serve.api_key, or bind to 127.0.0.1"
        )


def check_cors(origins: list[str], api_key: str | None) -> None:
    """
    Refuse a CORS allow-list that is not one: origins are `scheme://host[:port]`, and `*` (every web
    page) is never granted together with an API key, which it would hand to any page a user opens.
    """
    for origin in origins:
        if origin == "*":
            if api_key:
                raise ServeError(
                    'refusing serve.cors_origins=["*"] with an API key: any web page could then call the server '
                    "with the user's browser; list the origins that need it, e.g. serve.cors_origins=[http://localhost:3000]"
                )
            continue
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") or parts.query:
            raise ServeError(
                f"serve.cors_origins: {origin!r} is not an origin: give scheme://host[:port], e.g. http://localhost:3000"
            )


def check_allow_lists(cfg: "DictConfig") -> None:
    """Refuse an entry of `serve.allowed_hosts` or `serve.allowed_origins` that names no host or origin."""
    from pipelines.serving.origin_guard import EVERY, origin_host, split_host

    for host in cfg.serve.allowed_hosts:
        try:
            if host != EVERY:
                split_host(host)
        except ValueError as exc:
            raise ServeError(f"serve.allowed_hosts: {exc}: give a host name or name:port, e.g. kb.internal") from exc
    for origin in cfg.serve.allowed_origins:
        if origin != EVERY and origin_host(origin) is None:
            raise ServeError(
                f"serve.allowed_origins: {origin!r} is not an origin: give scheme://host[:port], e.g. http://localhost:3000"
            )


def allowed_origins(cfg: "DictConfig") -> list[str]:
    """The web origins answered besides the server's own: `serve.allowed_origins` and the CORS allow-list."""
    return [*cfg.serve.allowed_origins, *cors_allowed(list(cfg.serve.cors_origins))]


def cors_allowed(origins: list[str]) -> list[str]:
    """The origins as the browser sends them (no trailing slash)."""
    return [origin.rstrip("/") for origin in origins]


def lookup_slots(max_concurrent_lookups: int | None) -> int:
    """The lookups one worker runs at once: `serve.max_concurrent_lookups`, or one per CPU (null)."""
    return max_concurrent_lookups or os.cpu_count() or 1


def check_workers(cfg: "DictConfig", workers: int, mcp: bool) -> None:
    """Refuse several worker processes where they cannot share the stores (or the MCP sessions)."""
    if workers < 1:
        raise ServeError(f"--workers must be at least 1, not {workers}")
    limit = cfg.serve.max_concurrent_lookups
    if limit is not None and limit < 1:
        raise ServeError(f"serve.max_concurrent_lookups must be at least 1 (or null: one per CPU), not {limit}")
    if cfg.serve.health_timeout_s <= 0:
        raise ServeError(f"serve.health_timeout_s must be above 0 (seconds), not {cfg.serve.health_timeout_s}")
    if workers == 1:
        return
    from components.stores.milvus_collection import is_local_uri

    if is_local_uri(cfg.milvus.uri):
        raise ServeError(
            f"refusing --workers {workers} on Milvus Lite ({cfg.milvus.uri}): Milvus Lite is one process per db file; "
            "serve several workers from a Milvus server: milvus=server milvus.uri=http://HOST:19530"
        )
    if mcp:
        raise ServeError(
            f"refusing --mcp with --workers {workers}: an MCP session lives in one process; "
            "run one MCP process per port (or several behind a load balancer with sticky sessions)"
        )
