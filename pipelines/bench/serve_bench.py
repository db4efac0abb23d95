"""
`knowledge bench serve`: load on a running `knowledge serve` over loopback, or (`--workers 1,2`)
on servers it starts itself with each worker count (the Milvus server and trace database shared).

One client first (its p50 is the reference), then N concurrent clients for T seconds: requests/s,
p50/p95/p99 and errors. The server-side overhead is the single-client HTTP p50 minus the p50 of
the same requests' own lookup time (`latency_ms` of their trace rows, measured in the server).
"""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig

from components.common.stats import percentile
from pipelines.bench.machine import OtherCpu, format_other_cpu
from pipelines.dev.milvus_server import free_port
from pipelines.serving.bind import API_KEY_ENV
from pipelines.serving.loadgen import LoadResult, run_load
from pipelines.state.traces import open_store

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


# The longest a served process may take to load its model and answer: start-up, not load.
WORKERS_READY_TIMEOUT_S = 600.0


@contextmanager
def served_workers(overrides: list[str], workers: int, log_path: Path) -> Iterator[str]:
    """
    `knowledge serve --workers N` on a free loopback port, in its own process group; yields its URL
    once `/health` has answered from N distinct worker pids; always stops the group.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "pipelines.cli", "serve", "--port", str(port), "--workers", str(workers)]
    with open(log_path, "wb") as log:
        process = subprocess.Popen([*command, *overrides], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_workers(process, url, workers, log_path)
        yield url
    finally:
        _stop_group(process)


def _wait_for_workers(process: subprocess.Popen, url: str, workers: int, log_path: Path) -> None:
    import httpx

    pids: set[int] = set()
    deadline = time.monotonic() + WORKERS_READY_TIMEOUT_S
    while len(pids) < workers:
        if process.poll() is not None:
            raise RuntimeError(f"knowledge serve exited with {process.returncode}: see {log_path}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pids)} of {workers} worker(s) answered within {WORKERS_READY_TIMEOUT_S:.0f} s")
        try:
            report = httpx.get(f"{url}/health", timeout=10.0).json()
            if report.get("status") == "ok":
                pids.add(report["pid"])
        except (httpx.HTTPError, ValueError, KeyError):
            time.sleep(1.0)  # not listening yet
        time.sleep(0.1)


def _stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the server's group (uvicorn stops its workers), SIGKILL after a grace period."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)


def bench_serve_workers(
    cfg: DictConfig, overrides: list[str], worker_counts: list[int], clients: int = 8, duration: float = 30.0
) -> dict[int, dict]:
    """
    For each worker count: start `knowledge serve --workers N` with `overrides` (a Milvus server and
    a shared trace database), load it with `clients` clients for `duration` seconds, count the trace
    rows it wrote (they must equal the requests), stop it. Prints requests/s, p95 and the scaling ratio.
    """
    store = open_store(cfg)
    api_key = os.environ.get(API_KEY_ENV)
    figures: dict[int, dict] = {}
    print(f"knowledge bench serve --workers {','.join(map(str, worker_counts))} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="knowledge-bench-serve-") as folder:
        for workers in worker_counts:
            with served_workers(overrides, workers, Path(folder) / f"serve-{workers}.log") as url:
                run_load(url, clients, WARM_UP_REQUESTS_S, api_key)  # every worker warm before the timed run
                before = store.count()
                with OtherCpu() as during:
                    loaded = run_load(url, clients, duration, api_key)
                rows = store.count() - before
            summary = _summary(loaded)
            requests = summary["requests"] + summary["errors"]
            figures[workers] = {**summary, "trace_rows": rows, "other_cpu": during.share}
            print(
                f"  {workers} worker(s), {clients} clients, {loaded.seconds:.0f} s: {requests} requests, "
                f"{summary['requests_per_s']} req/s, p50 {summary['p50_ms']} ms, p95 {summary['p95_ms']} ms, "
                f"errors {summary['errors']}; trace rows {rows} ({'equal' if rows == requests else 'DIFFER'})"
            )
            print(f"    during the load (the served workers and Milvus included): {format_other_cpu(during.share)}")
            if loaded.first_error:
                print(f"    first error: {loaded.first_error}")
    if len(worker_counts) > 1:
        low, high = worker_counts[0], worker_counts[-1]
        ratio = (
            figures[high]["requests_per_s"] / figures[low]["requests_per_s"] if figures[low]["requests_per_s"] else 0
        )
        print(f"  scaling: {high} vs {low} worker(s) = {ratio:.2f}x requests/s")
        print(
            f"  bound: {os.cpu_count()} CPU cores shared by the workers (each lookup is CPU work: the query "
            "embedding, rerank, packing), the Milvus server, PostgreSQL and this load generator"
        )
    return figures
