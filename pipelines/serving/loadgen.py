"""
A bounded HTTP load generator for `knowledge bench serve`: N asyncio clients, each sending one
request after the other for T seconds, then stopping. Latency per request, errors counted.
"""

import asyncio
import time
from dataclasses import dataclass, field

import httpx

# Varied queries over the sample knowledge base: found and not found, short and long.
QUERIES = (
    "disk almost full on a worker node",
    "postgres replica is lagging behind the primary",
    "TLS certificate expires soon",
    "a process is using 100% CPU",
    "inodes exhausted but disk has space",
    "pods are OOMKilled",
    "DNS resolution fails inside the cluster",
    "how do I bake sourdough bread",
)


@dataclass
class LoadResult:
    clients: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    invocation_ids: list[str] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None

    @property
    def requests_per_s(self) -> float:
        return (len(self.latencies_ms) + self.errors) / self.seconds if self.seconds else 0.0


async def _client(http: httpx.AsyncClient, url: str, offset: int, deadline: float, result: LoadResult) -> None:
    number = offset
    while time.perf_counter() < deadline:
        query = QUERIES[number % len(QUERIES)]
        number += 1
        started = time.perf_counter()
        try:
            response = await http.post(url, json={"query": query})
            elapsed = (time.perf_counter() - started) * 1000.0
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
            result.latencies_ms.append(elapsed)
            result.invocation_ids.append(response.json()["invocationId"])
        except Exception as exc:  # counted, and the first one shown: a load run reports errors, it does not stop
            result.errors += 1
            result.first_error = result.first_error or f"{type(exc).__name__}: {exc}"


async def _run(base_url: str, clients: int, seconds: float, api_key: str | None) -> LoadResult:
    url = base_url.rstrip("/") + "/lookup_knowledge/run"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    result = LoadResult(clients=clients, seconds=seconds)
    async with httpx.AsyncClient(headers=headers, limits=limits, timeout=120.0) as http:
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(*(_client(http, url, i, deadline, result) for i in range(clients)))
        result.seconds = time.perf_counter() - started  # the last requests finish after the deadline
    return result


def run_load(base_url: str, clients: int, seconds: float, api_key: str | None = None) -> LoadResult:
    """`clients` concurrent clients against `base_url` for `seconds` (each finishes its last request)."""
    return asyncio.run(_run(base_url, clients, seconds, api_key))
