"""
ASGI middleware in front of the app: API key, body size limit, and the shape of a lookup request,
each refused with a JSON error (`{"error": code, "detail": reason}`) before any pipeline code runs.
"""

import hmac
import json
import logging
import re
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

# Paths anyone may read without a key: liveness probes must not need a secret.
OPEN_PATHS = ("/health",)
# An over-size JSON-RPC body is read to its end (to answer it) up to this many times the limit; beyond, 413.
JSONRPC_DRAIN_FACTOR = 64
JSONRPC_INVALID_REQUEST = -32600
_JSONRPC_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)')
_JSONRPC_METHOD = re.compile(rb'"method"\s*:\s*"([^"]+)"')


class RequestRefused(Exception):
    def __init__(self, status: int, error: str, detail: str, head: bytes = b"", more: bool = True) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.head = head  # of a body over the limit: what was read of it before the refusal
        self.more = more  # and whether more of it is still to come


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


def jsonrpc_refusal(head: bytes, tail: bytes, reason: str) -> dict[str, Any] | None:
    """
    The JSON-RPC answer to a request refused for `reason`, read from the start and the end of its
    body (its id and method come before or after `params`, which may hold keys of the same names):
    a `tools/call` gets a tool error (the agent sees the reason, the session goes on), any other
    request a JSON-RPC error. None when neither end names an id (nothing to answer to).
    """
    before = head.split(b'"params"', 1)[0]
    after = tail.rstrip()[:-1].rsplit(b"}", 1)[-1]  # between the end of `params` and the body's last brace
    found = _JSONRPC_ID.search(before) or _JSONRPC_ID.search(after)
    if found is None:
        return None
    request_id = json.loads(found.group(1))
    method = _JSONRPC_METHOD.search(before) or _JSONRPC_METHOD.search(after)
    if method is not None and method.group(1) == b"tools/call":
        text = f"{reason}: send a shorter query (a lookup reads at most query.max_chars characters of it)"
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {"content": [{"type": "text", "text": text}], "isError": True},
        }
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": JSONRPC_INVALID_REQUEST, "message": reason}}


class RequestGuard:
    """
    Checks each HTTP request: `Authorization: Bearer <key>` when a key is set (401, constant-time
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
        read_timeout_s: float | None = None,
        jsonrpc_prefixes: Iterable[str] = (),
    ) -> None:
        self.app = app
        self._expected = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes
        self.validated_paths = tuple(validated_paths)
        self.read_timeout_s = read_timeout_s
        # Paths of JSON-RPC (MCP) clients: a body over the limit gets a JSON-RPC answer, not a 413
        # the client's session would not survive.
        self.jsonrpc_prefixes = tuple(jsonrpc_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            self._authorize(scope)
            body = await self._read_body(scope, receive)
            if body is not None and scope["method"] == "POST" and scope["path"] in self.validated_paths:
                check_json_content_type(scope)
                check_lookup_body(body)
        except RequestRefused as refused:
            logger.info("refused %s %s: %s %s", scope["method"], scope["path"], refused.status, refused.error)
            if self._speaks_jsonrpc(scope, refused) and await self._answer_as_jsonrpc(refused, receive, send):
                return
            await _send_json(send, refused.status, {"error": refused.error, "detail": refused.detail})
            return
        await self.app(scope, _replay(body, receive) if body is not None else receive, send)

    def _speaks_jsonrpc(self, scope: Scope, refused: RequestRefused) -> bool:
        return refused.status == 413 and bool(self.jsonrpc_prefixes) and scope["path"].startswith(self.jsonrpc_prefixes)

    async def _answer_as_jsonrpc(self, refused: RequestRefused, receive: Receive, send: Send) -> bool:
        """
        Read the rest of an over-size JSON-RPC body (up to `JSONRPC_DRAIN_FACTOR` times the limit)
        and answer its call: a tool call gets a tool error with the reason, any other request a
        JSON-RPC error. False (then a 413) for a body larger still, or one that says no id.
        """
        head, size, more = refused.head, len(refused.head), refused.more
        tail = head
        while more and size <= self.max_body_bytes * JSONRPC_DRAIN_FACTOR:
            try:
                message = await self._receive(receive)
            except RequestRefused as stalled:  # the rest of the body stopped arriving: 408 as anywhere
                await _send_json(send, stalled.status, {"error": stalled.error, "detail": stalled.detail})
                return True
            if message["type"] == "http.disconnect":
                return True
            chunk = message.get("body", b"")
            size += len(chunk)
            head += chunk[: max(0, self.max_body_bytes - len(head))]
            tail = (tail + chunk)[-self.max_body_bytes :]
            more = message.get("more_body", False)
        reason = f"the request is over serve.max_body_bytes ({self.max_body_bytes} bytes)"
        answer = jsonrpc_refusal(head, tail, reason)
        if more or answer is None:
            return False
        await _send_json(send, 200, answer)
        return True

    def _authorize(self, scope: Scope) -> None:
        if self._expected is None or scope["path"] in OPEN_PATHS or _is_cors_preflight(scope):
            return
        scheme, _, given = (_header(scope, b"authorization") or b"").strip().partition(b" ")
        # Auth schemes are case-insensitive (RFC 9110 11.1): `bearer K` is `Bearer K`.
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self._expected):
            raise RequestRefused(401, "unauthorized", "missing or wrong API key: send Authorization: Bearer <key>")

    async def _receive(self, receive: Receive) -> Message:
        """
        The next message of a body, or 408 when the client sends nothing for `read_timeout_s`: an
        idle time between reads, so a slow but steady sender is served (a stalled one would hold a
        connection and a slot).
        """
        if not self.read_timeout_s:
            return await receive()
        import anyio

        with anyio.move_on_after(self.read_timeout_s):
            return await receive()
        raise RequestRefused(
            408, "body_timeout", f"nothing of the body arrived for {self.read_timeout_s:g} s (serve.read_timeout_s)"
        )

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
            message = await self._receive(receive)
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)
            if size > self.max_body_bytes:
                head = b"".join(chunks)[: self.max_body_bytes]
                more = message.get("more_body", False)
                raise RequestRefused(413, "body_too_large", f"body over {self.max_body_bytes} bytes", head, more)
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
    if status == 408:  # the rest of the body is not coming: close now, not after uvicorn's keep-alive wait
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
