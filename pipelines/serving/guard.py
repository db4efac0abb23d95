"""
ASGI middleware in front of the app: API key, body size limit, and the shape of a lookup request,
each refused with a JSON error (`{"error": code, "detail": reason}`) before any pipeline code runs.
"""

import hmac
import json
import logging
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

# Paths anyone may read without a key: liveness probes must not need a secret.
OPEN_PATHS = ("/health",)


class RequestRefused(Exception):
    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail


def check_lookup_body(body: bytes, fields: Iterable[str] = ("query",)) -> None:
    """
    Refuse (422) a body that is not a JSON object with exactly a string `query`. A blank query is a
    tool call with a bad argument: the service refuses it after recording it (its trace row).
    """
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestRefused(
            422, "invalid_json", f"body is not JSON: {exc.msg if hasattr(exc, 'msg') else exc}"
        ) from exc
    except RecursionError as exc:  # thousands of nested arrays: the parser's stack, not a server fault
        raise RequestRefused(422, "invalid_json", 'body is nested too deeply: send {"query": "..."}') from exc
    if not isinstance(payload, dict):
        raise RequestRefused(422, "invalid_body", 'body must be a JSON object: {"query": "..."}')
    unknown = sorted(set(payload) - set(fields))
    if unknown:
        raise RequestRefused(422, "unknown_field", f"unknown field(s) {', '.join(unknown)}; the only field is query")
    if "query" not in payload:
        raise RequestRefused(422, "missing_query", "query is missing: give the question or alert text to look up")
    query = payload["query"]
    if not isinstance(query, str):
        raise RequestRefused(422, "invalid_query", f"query must be a string, not {type(query).__name__}")


def check_json_content_type(scope: Scope) -> None:
    """Refuse (422) a lookup body not declared as JSON, in the documented shape rather than FastAPI's."""
    declared = (_header(scope, b"content-type") or b"").split(b";", 1)[0].strip().lower()
    if declared != b"application/json" and not declared.endswith(b"+json"):
        shown = declared.decode("latin-1") or "none"
        raise RequestRefused(
            422, "invalid_content_type", f"Content-Type is {shown}: send the body as Content-Type: application/json"
        )


class RequestGuard:
    """
    Checks each HTTP request: paths it does not serve (404), `Authorization: Bearer <key>` when a key is set (401, constant-time
    compare), the body size (413 over `max_body_bytes`), and for `validated_paths` the lookup body
    (422). The key is never logged.

    Usage example:

    ```python
    app = RequestGuard(app, api_key=None, max_body_bytes=16384, validated_paths=("/lookup_knowledge/run",))
    ```
    """

    def __init__(
        self,
        app: ASGIApp,
        api_key: str | None,
        max_body_bytes: int,
        validated_paths: Iterable[str] = (),
        blocked_prefixes: Iterable[str] = (),
        read_timeout_s: float | None = None,
    ) -> None:
        self.app = app
        self.blocked_prefixes = tuple(blocked_prefixes)
        self._expected = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes
        self.validated_paths = tuple(validated_paths)
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            if self.blocked_prefixes and scope["path"].startswith(self.blocked_prefixes):
                raise RequestRefused(404, "not_found", f"{scope['path']} is not served here")
            self._authorize(scope)
            body = await self._read_body_in_time(scope, receive)
            if body is not None and scope["method"] == "POST" and scope["path"] in self.validated_paths:
                check_json_content_type(scope)
                check_lookup_body(body)
        except RequestRefused as refused:
            logger.info("refused %s %s: %s %s", scope["method"], scope["path"], refused.status, refused.error)
            await _send_json(send, refused.status, {"error": refused.error, "detail": refused.detail})
            return
        await self.app(scope, _replay(body, receive) if body is not None else receive, send)

    def _authorize(self, scope: Scope) -> None:
        if self._expected is None or scope["path"] in OPEN_PATHS or _is_cors_preflight(scope):
            return
        scheme, _, given = (_header(scope, b"authorization") or b"").strip().partition(b" ")
        # Auth schemes are case-insensitive (RFC 9110 11.1): `bearer K` is `Bearer K`.
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self._expected):
            raise RequestRefused(401, "unauthorized", "missing or wrong API key: send Authorization: Bearer <key>")

    async def _read_body_in_time(self, scope: Scope, receive: Receive) -> bytes | None:
        """The body, or 408 when the client stops sending it for `read_timeout_s` (it would hold a connection)."""
        if not self.read_timeout_s:
            return await self._read_body(scope, receive)
        import anyio

        with anyio.move_on_after(self.read_timeout_s) as scope_timer:
            return await self._read_body(scope, receive)
        if scope_timer.cancelled_caught:
            raise RequestRefused(408, "body_timeout", f"the body did not arrive within {self.read_timeout_s:g} s")
        return None

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body of a request that has one (buffered, bounded), else None."""
        if scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            return None
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise RequestRefused(413, "body_too_large", f"body over {self.max_body_bytes} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise RequestRefused(413, "body_too_large", f"body over {self.max_body_bytes} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _is_cors_preflight(scope: Scope) -> bool:
    """
    A browser's CORS preflight carries no credentials by design; the app's CORS middleware answers
    it (granting only the configured origins) without running any route.
    """
    return scope["method"] == "OPTIONS" and _header(scope, b"access-control-request-method") is not None


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
