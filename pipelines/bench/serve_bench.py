"""
`knowledge bench serve`: load on a running `knowledge serve` over loopback.

One client first (its p50 is the reference), then N concurrent clients for T seconds: requests/s,
p50/p95/p99 and errors. The server-side overhead is the single-client HTTP p50 minus the p50 of
the same requests' own lookup time (`latency_ms` of their trace rows, measured in the server).
"""

import os
import time

from omegaconf import DictConfig

from pipelines.bench.machine import OtherCpu, format_other_cpu, percentile
from pipelines.serving.bind import API_KEY_ENV
from pipelines.serving.loadgen import LoadResult, run_load
from pipelines.traces import open_store

WARM_UP_REQUESTS_S = 3.0


def _summary(result: LoadResult) -> dict[str, float]:
    latencies = result.latencies_ms or [float("nan")]
    return {
        "requests": len(result.latencies_ms),
        "errors": result.errors,
        "requests_per_s": round(result.requests_per_s, 1),
        "p50_ms": round(percentile(latencies, 0.5), 1),
        "p95_ms": round(percentile(latencies, 0.95), 1),
        "p99_ms": round(percentile(latencies, 0.99), 1),
    }


def server_lookup_ms(cfg: DictConfig, invocation_ids: list[str]) -> list[float]:
    """The lookup latency each invocation recorded in its trace row (in the server process)."""
    store = open_store(cfg)
    latencies = []
    for invocation_id in invocation_ids:
        row = store.get(invocation_id)
        if row is not None and row.get("latency_ms") is not None:
            latencies.append(float(row["latency_ms"]))
    return latencies


def bench_serve(cfg: DictConfig, url: str, clients: int = 8, seconds: float = 60.0, single_seconds: float = 15.0):
    """Run both phases and print the figures (the config locates the server's trace database)."""
    api_key = os.environ.get(API_KEY_ENV)
    with OtherCpu() as idle:
        time.sleep(2.0)
    run_load(url, 1, WARM_UP_REQUESTS_S, api_key)
    single = run_load(url, 1, single_seconds, api_key)
    with OtherCpu() as during:
        loaded = run_load(url, clients, seconds, api_key)
    one, many = _summary(single), _summary(loaded)
    server_ms = server_lookup_ms(cfg, single.invocation_ids)
    server_p50 = percentile(server_ms, 0.5) if server_ms else float("nan")
    overhead = one["p50_ms"] - server_p50
    print(f"knowledge bench serve against {url} ({os.cpu_count()} CPUs)")
    print(
        f"  1 client, {single.seconds:.0f} s: {one['requests']} requests, {one['requests_per_s']} req/s, "
        f"p50 {one['p50_ms']} ms, p95 {one['p95_ms']} ms, errors {one['errors']}"
    )
    print(
        f"  {clients} clients, {loaded.seconds:.0f} s: {many['requests']} requests, {many['requests_per_s']} req/s, "
        f"p50 {many['p50_ms']} ms, p95 {many['p95_ms']} ms, p99 {many['p99_ms']} ms, errors {many['errors']}"
    )
    if loaded.first_error or single.first_error:
        print(f"  first error: {loaded.first_error or single.first_error}")
    print(f"  p95 at {clients} clients / single-client p50: {many['p95_ms'] / one['p50_ms']:.2f} (target <= 4)")
    print(
        f"  overhead: HTTP p50 {one['p50_ms']} ms - lookup p50 in the server {server_p50:.1f} ms "
        f"(trace rows of the same {len(server_ms)} requests) = {overhead:.1f} ms (target <= 5)"
    )
    print(f"  before the run: {format_other_cpu(idle.share)}")
    print(f"  during the {clients}-client phase (the server included): {format_other_cpu(during.share)}")
    return {"single": one, "concurrent": many, "server_lookup_p50_ms": server_p50, "overhead_ms": overhead}
