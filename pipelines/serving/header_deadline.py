"""
uvicorn's HTTP protocol with a deadline on a request's headers: uvicorn bounds the wait between
requests on a kept-alive connection, not the wait for headers that never finish, so a client that
sends half a request line would hold its connection for good. A connection whose request headers
are not complete within `serve.read_timeout_s` (counted from the connection, or from the previous
response) is answered 408 and closed; an idle one is closed as keep-alive does.
"""

import asyncio

from uvicorn.protocols.http.auto import AutoHTTPProtocol

DEFAULT_TIMEOUT_S = 10.0
_TIMEOUT_BODY = b'{"error": "header_timeout", "detail": "the request headers did not finish in time"}'
TIMEOUT_ANSWER = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    + f"content-length: {len(_TIMEOUT_BODY)}\r\n\r\n".encode()
    + _TIMEOUT_BODY
)


class HeaderDeadlineProtocol(AutoHTTPProtocol):
    """The protocol uvicorn would pick (httptools, else h11) with the headers' deadline."""

    timeout_s = DEFAULT_TIMEOUT_S  # set by the served app from serve.read_timeout_s, in each worker process

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        self._partial = self._partial or bool(data)
        super().data_received(data)
        if self._headers_complete():
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _headers_complete(self) -> bool:
        """Whether a request is past its headers (httptools: a cycle started since the deadline was armed)."""
        return self.cycle is not None and self.cycle is not self._cycle_at_arm

    def _arm(self) -> None:
        self._disarm()
        self._partial = False
        self._cycle_at_arm = getattr(self, "cycle", None)
        if self._cycle_at_arm is not None and not self._cycle_at_arm.response_complete:
            return  # a pipelined request is already past its headers
        self._deadline: asyncio.TimerHandle | None = asyncio.get_event_loop().call_later(self.timeout_s, self._expire)

    def _disarm(self) -> None:
        deadline = getattr(self, "_deadline", None)
        if deadline is not None:
            deadline.cancel()
        self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self._headers_complete():
            return
        if self._partial:
            self.transport.write(TIMEOUT_ANSWER)
        self.transport.close()
