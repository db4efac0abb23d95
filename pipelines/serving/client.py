"""`knowledge lookup --url`: ask a running `knowledge serve` instead of opening the stores here."""

import os
from typing import Any

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
    """
    import httpx

    key = api_key or os.environ.get(API_KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    endpoint = url.rstrip("/") + "/lookup_knowledge/run"
    try:
        response = httpx.post(endpoint, json={"query": query}, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise RemoteLookupError(f"cannot reach {endpoint}: {exc}") from exc
    body = _json(response)
    if response.status_code == 200:
        return 200, body
    if response.status_code == 503 and "evidenceStatus" in body:
        return 503, body
    reason = body.get("detail") or response.text[:200]
    raise RemoteLookupError(f"server refused the query ({response.status_code}): {reason}", response.status_code < 500)


def _json(response: Any) -> dict:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
