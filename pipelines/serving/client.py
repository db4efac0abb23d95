"""`knowledge lookup --url`: ask a running `knowledge serve` instead of opening the stores here."""

import http.client
import json
import os
import urllib.error
import urllib.request

from pipelines.serving.bind import API_KEY_ENV


class RemoteLookupError(RuntimeError):
    """The server refused the query (4xx, `bad_input`) or could not be reached or answer."""

    def __init__(self, message: str, bad_input: bool = False) -> None:
        super().__init__(message)
        self.bad_input = bad_input


def remote_lookup(url: str, query: str, api_key: str | None = None, timeout_s: float = 60.0) -> tuple[int, dict]:
    """
    POST the query to `<url>/lookup_knowledge/run`; returns (HTTP status, result dict). A 503 still
    carries the structured failure result. `KNOWLEDGE_API_KEY` is sent as the bearer key when set.
    The standard library's HTTP client: an HTTP library's import would cost more than the lookup.
    """
    key = api_key or os.environ.get(API_KEY_ENV)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    endpoint = url.rstrip("/") + "/lookup_knowledge/run"
    try:
        request = urllib.request.Request(endpoint, json.dumps({"query": query}).encode(), headers, method="POST")
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as exc:  # an answer all the same: 4xx/5xx with a body
        status, text = exc.code, exc.read()
    except (OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise RemoteLookupError(f"cannot reach {endpoint}: {reason}") from exc
    body = _json(text)
    if status == 200:
        return 200, body
    if status == 503 and "evidenceStatus" in body:
        return 503, body
    reason = body.get("detail") or text[:200].decode("utf-8", "replace")
    raise RemoteLookupError(f"server refused the query ({status}): {reason}", status < 500)


def _json(text: bytes) -> dict:
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
