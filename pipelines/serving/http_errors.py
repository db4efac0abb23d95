"""
The one error shape of the served apps, `{"error": code, "detail": reason}`, for the errors the
routing and FastAPI raise themselves (the request guard answers its own refusals in that shape).
"""

from starlette.requests import Request
from starlette.responses import JSONResponse

# The error codes of HTTP errors raised with a text detail (the routing's own, `/status/NAME`).
HTTP_ERROR_CODES = {404: "not_found", 405: "method_not_allowed"}


async def structured_http_error(request: Request, exc) -> JSONResponse:
    """
    An HTTP error as JSON of the documented shape: the routing's own 404 and 405 (FastAPI's
    `{"detail": ...}`, Starlette's plain text) alike. The wrapper raises with a dict: the refusal
    reason, or the failed lookup's result, answered as it is.
    """
    if isinstance(exc.detail, dict):
        body = exc.detail
    elif exc.status_code == 404 and exc.detail == "Not Found":  # no route: say which path
        body = {"error": "not_found", "detail": f"{request.url.path} is not served here"}
    else:
        body = {"error": HTTP_ERROR_CODES.get(exc.status_code, "http_error"), "detail": str(exc.detail)}
    return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def documented_validation_error(_request: Request, exc) -> JSONResponse:
    """FastAPI's own shape echoes the input back; answer the documented one with the first reason."""
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ()) if part not in ("body", "query"))
    detail = f"{where}: {first.get('msg', 'invalid request')}" if where else first.get("msg", "invalid request")
    return JSONResponse({"error": "invalid_request", "detail": detail}, status_code=422)
