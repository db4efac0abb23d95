"""
ASGI middleware in front of the served app: the `Host` and `Origin` allow-lists. A web page whose
name the attacker re-points at 127.0.0.1 (DNS rebinding) reaches a loopback server with its own
name in both headers; refusing names the server does not answer to keeps such a page from reading
the knowledge base, with or without a key (docs/serving.md).
"""

import json
import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

logger = logging.getLogger(__name__)

# The names of this machine's loopback interface, answered on the serving port.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# Bind addresses that name no host a client could use.
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
EVERY = "*"


def split_host(value: str) -> tuple[str, int | None]:
    """
    `name[:port]` (an IPv6 address in brackets) as a lower-case name and its port, None when it
    names none. Raises ValueError when it is not a host.
    """
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{value!r} is not a host")
        port = rest[1:]
    elif value.count(":") == 1:
        name, _, port = value.partition(":")
    else:
        name, port = value, ""  # no port, or a bare IPv6 address
    if not name or any(char in name for char in "/?#@ "):
        raise ValueError(f"{value!r} is not a host")
    if not port:
        return name, None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} has no valid port")
    return name, int(port)


def origin_host(origin: str) -> tuple[str, int] | None:
    """The host and port of a web origin (`scheme://host[:port]`), None when it is not one (`null`)."""
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    try:
        name, port = split_host(parts.netloc)
    except ValueError:
        return None
    return name, port if port is not None else DEFAULT_PORTS[parts.scheme]


def normalized_origin(origin: str) -> str:
    """An origin as a browser sends it: lower case, no trailing slash."""
    return origin.strip().rstrip("/").lower()


class OriginGuard:
    """
    Answers 403 with a JSON reason to a request whose `Host` is not this server's, or whose
    `Origin` (sent by browsers) is neither this server nor an allowed web origin. This server is
    its loopback names and the bound host on the serving port (the port the connection came in
    on), and the names of `allowed_hosts` (`name` on any port, `name:port` on that one; `*`: any).
    Allowed origins are those of `allowed_origins` (`*`: any); a request without `Origin` (curl,
    agents) is checked on its `Host` only.

    Usage example:

    ```python
    app = OriginGuard(app, allowed_hosts=["kb.internal"], allowed_origins=["http://localhost:3000"])
    ```
    """

    def __init__(
        self,
        app: ASGIApp,
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
        bound_host: str | None = None,
    ) -> None:
        self.app = app
        self.allowed_hosts = tuple(allowed_hosts)
        self.allowed_origins = tuple(allowed_origins)
        self.bound_host = bound_host
        self._any_host = EVERY in self.allowed_hosts
        self._any_origin = EVERY in self.allowed_origins
        self._listed_hosts = [split_host(host) for host in self.allowed_hosts if host != EVERY]  # raises on a bad one
        for origin in self.allowed_origins:
            if origin != EVERY and origin_host(origin) is None:
                raise ValueError(f"{origin!r} is not an origin: give scheme://host[:port], e.g. http://localhost:3000")
        self._origins = {normalized_origin(origin) for origin in self.allowed_origins}
        bound = [bound_host.strip("[]").lower()] if bound_host and bound_host not in WILDCARD_HOSTS else []
        self._own_names = tuple(dict.fromkeys([*LOOPBACK_NAMES, *bound]))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        error, detail = refusal
        logger.info("refused %s %s: 403 %s", scope.get("method", "WEBSOCKET"), scope["path"], error)
        if scope["type"] == "websocket":  # closing before accepting is a 403 to the client
            await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
            return
        await _send_403(send, {"error": error, "detail": detail})

    def refusal(self, scope: Scope) -> tuple[str, str] | None:
        """(error, detail) of a request this server must not answer, None for one it may."""
        host = _header(scope, b"host")
        if not self._any_host and (host is None or not self._is_own_host(host, scope)):
            shown = host if host is not None else "none"
            return "forbidden_host", f"Host {shown} is not this server: list it in serve.allowed_hosts to serve it"
        origin = _header(scope, b"origin")
        if origin is None or self._any_origin or normalized_origin(origin) in self._origins:
            return None
        named = origin_host(origin)
        if named is not None and self._is_own(*named, scope):
            return None
        return (
            "forbidden_origin",
            f"Origin {origin} may not call this server: list it in serve.allowed_origins (or serve.cors_origins)",
        )

    def _is_own_host(self, host: str, scope: Scope) -> bool:
        try:
            name, port = split_host(host)
        except ValueError:
            return False
        return self._is_own(name, port if port is not None else DEFAULT_PORTS.get(scope.get("scheme", "http")), scope)

    def _is_own(self, name: str, port: int | None, scope: Scope) -> bool:
        server = scope.get("server")
        serving_port = server[1] if server and len(server) > 1 else None
        arrived_at = str(server[0]).lower() if server else None  # the address the client connected to
        if (name in self._own_names or name == arrived_at) and serving_port in (None, port):
            return True
        return any(name == listed and listed_port in (None, port) for listed, listed_port in self._listed_hosts)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _send_403(send: Send, payload: dict[str, str]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 403, "headers": headers})
    await send({"type": "http.response.body", "body": body})
