"""
What MLflow tracing costs a lookup: tracing off vs on, in the same process, in alternating blocks.

For each mode: total CPU per lookup across all processes (this one, its child processes, and a
tracking server the bench started), saturated throughput (`threads` threads calling
`LookupService.lookup` back to back for `seconds`, then waiting for the traces to be written,
which counts in the time), and single-thread p50/p95 latency. Both modes record their
`tool_invocation` row; the difference is the MLflow trace.

    python -m pipelines.bench.tracing [--threads N] [--seconds S] [--rounds R] [--server] [key=value ...]

With no `mlflow.tracking_uri` in the config, MLflow on writes to a sqlite store in the bench's
temp folder; `--server` starts `mlflow server` on 127.0.0.1 (sqlite backend) and traces to it.
"""

import argparse
import contextlib
import copy
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from components.common.stats import percentile
from pipelines.bench.machine import _machine_busy_s, format_other_cpu

DEFAULT_QUERIES = (
    "disk almost full on a worker node",
    "postgres replica lag",
    "certificate expiry",
    "runaway process high cpu",
    "inode exhaustion df -i",
    "how to bake sourdough bread",
)
# Tracing on may cost at most this share of saturated throughput.
THROUGHPUT_LIMIT = 0.10


class ProcessTreeCpu:
    """CPU seconds (user + system) of this process and every process under it seen so far."""

    def __init__(self, extra_pids: Sequence[int] = ()) -> None:
        import psutil

        self._psutil = psutil
        self._roots = [psutil.Process(), *(psutil.Process(pid) for pid in extra_pids)]
        self._seen: dict[int, Any] = {}
        self._last: dict[int, float] = {}

    def _cpu(self, process: Any) -> float:
        try:
            times = process.cpu_times()
            self._last[process.pid] = times.user + times.system
        except self._psutil.Error:
            pass  # exited: its last reading stands
        return self._last.get(process.pid, 0.0)

    def total(self) -> float:
        for root in self._roots:
            with contextlib.suppress(self._psutil.Error):
                for child in root.children(recursive=True):
                    self._seen.setdefault(child.pid, child)
        processes = [*self._roots, *self._seen.values()]
        return sum(self._cpu(p) for p in processes)


def other_cpu_share(machine_start: float | None, tree_start: float, tree_end: float, wall_start: float) -> float | None:
    """Share of all CPUs that processes outside the bench's process tree used since the starts."""
    machine_end = _machine_busy_s()
    wall = time.perf_counter() - wall_start
    if machine_start is None or machine_end is None or wall <= 0:
        return None
    others = (machine_end - machine_start) - (tree_end - tree_start)
    return round(max(0.0, others) / (wall * (os.cpu_count() or 1)), 3)


def _flush() -> bool:
    """Wait for the traces handed to MLflow so far, its writer left running (as in a server)."""
    from components.tracing.mlflow_sink import drain

    return drain(timeout=300)


def trace_cost(
    service: Any, queries: Sequence[str], n: int = 30, build: Callable[[Any], dict[str, Any]] | None = None
) -> dict[str, float]:
    """
    CPU milliseconds per trace, apart from the lookup: building the trace (`build`, default
    `build_trace`), handing it to MLflow (spans), and writing it (MLflow's async queue drained).
    `service` has MLflow on; its lookups here are not timed, their traces are held back and
    replayed.
    """
    from components.tracing.mlflow_sink import _write, flush_all
    from components.tracing.trace_summary import build_trace

    build = build or build_trace
    writer = service.trace_writer
    sink = writer._sink
    held: list[Any] = []
    submit, sample_rate = sink.submit, writer.sample_rate
    sink.submit, writer.sample_rate = held.append, 1.0  # every lookup here: the cost of one trace
    try:
        for i in range(n):
            service.lookup(queries[i % len(queries)])
    finally:
        sink.submit, writer.sample_rate = submit, sample_rate
    flush_all()
    cpu = time.process_time()
    traces = [build(job) for job in held]
    built = time.process_time()
    for trace in traces:
        _write(trace, sink.experiment_id)
    handed = time.process_time()
    flush_all()
    written = time.process_time()
    return {
        "build_ms": round((built - cpu) * 1000.0 / len(held), 2),
        "spans_ms": round((handed - built) * 1000.0 / len(held), 2),
        "write_ms": round((written - handed) * 1000.0 / len(held), 2),
    }


def _saturate(lookup: Callable[[str], Any], queries: Sequence[str], threads: int, seconds: float) -> int:
    """Lookups done by `threads` threads back to back until `seconds` have passed."""
    stop = time.perf_counter() + seconds
    counts = [0] * threads

    def work(index: int) -> None:
        position = index
        while time.perf_counter() < stop:
            lookup(queries[position % len(queries)])
            position += threads
            counts[index] += 1

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def mlflow_server(folder: Path, ready_timeout: float = 120.0) -> Iterator[tuple[str, int]]:
    """An `mlflow server` on a free 127.0.0.1 port (sqlite backend in `folder`): (URI, pid); stopped after."""
    import urllib.request

    port = _free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    command = [
        sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{folder}/server.db",
        "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
        "--workers", "1",
    ]  # fmt: skip
    log = open(folder / "server.log", "wb")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mlflow server did not start; see {folder / 'server.log'}") from None
                time.sleep(0.5)
        yield uri, server.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
        log.close()


def compare_tracing_overhead(
    cfg: DictConfig,
    queries: Sequence[str] = DEFAULT_QUERIES,
    threads: int = 2,
    seconds: float = 4.0,
    rounds: int = 3,
    latency_lookups: int = 12,
    server_pid: int | None = None,
    trace_parts: bool = True,
    out: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """
    Tracing off vs on over `rounds` rounds; each round runs both modes (off-on, then on-off) and
    each mode `latency_lookups` single-thread lookups, then `threads` threads for `seconds`, then
    waits for its traces to be written. MLflow on uses `cfg.mlflow.tracking_uri`, or a sqlite store
    under the state folder when the config has MLflow off. `server_pid`: a tracking server's
    process, whose CPU counts in the total. `trace_parts`: also time a trace's parts apart
    (`trace_cost`; in this process only, a tracking server's share is not in it). Prints and
    returns the figures.
    """
    from components.tracing.mlflow_sink import release_all

    try:
        return _compare_modes(cfg, queries, threads, seconds, rounds, latency_lookups, server_pid, trace_parts, out)
    finally:  # the process stays free to trace elsewhere (the bench's own store goes with its folder)
        release_all()


def _compare_modes(cfg, queries, threads, seconds, rounds, latency_lookups, server_pid, trace_parts, out):
    from pipelines.lookup import LookupService

    cfg_off = copy.deepcopy(cfg)
    cfg_off.mlflow.tracking_uri = None
    cfg_on = copy.deepcopy(cfg)
    if not cfg_on.mlflow.tracking_uri:
        cfg_on.mlflow.tracking_uri = f"sqlite:///{cfg.paths.state_dir}/mlflow.db"
        cfg_on.mlflow.artifact_location = f"{cfg.paths.state_dir}/mlflow-artifacts"
    services = {"off": LookupService(cfg_off), "on": LookupService(cfg_on)}
    for service in services.values():
        service.warm_up()
        for query in queries:  # untimed: first-call costs (and MLflow's store set-up) stay out
            service.lookup(query)
    _flush()

    tree = ProcessTreeCpu([server_pid] if server_pid else [])
    latencies: dict[str, list[float]] = {"off": [], "on": []}
    lookups = {"off": 0, "on": 0}
    saturated = {"off": [0, 0.0], "on": [0, 0.0]}  # lookups, seconds (flush included)
    cpu = {"off": 0.0, "on": 0.0}
    drain_s = {"off": 0.0, "on": 0.0}  # of the saturated time: waiting for the traces to be written
    flushed = True
    machine_start, tree_start, wall_start = _machine_busy_s(), tree.total(), time.perf_counter()
    for round_index in range(rounds):
        for mode in ("off", "on") if round_index % 2 == 0 else ("on", "off"):
            lookup = services[mode].lookup
            cpu_start = tree.total()
            for i in range(latency_lookups):
                started = time.perf_counter()
                lookup(queries[i % len(queries)])
                latencies[mode].append((time.perf_counter() - started) * 1000.0)
            started = time.perf_counter()
            done = _saturate(lookup, queries, threads, seconds)
            waited = time.perf_counter()
            flushed = _flush() and flushed  # the traces are part of the work: their time counts
            drain_s[mode] += time.perf_counter() - waited
            saturated[mode][0] += done
            saturated[mode][1] += time.perf_counter() - started
            lookups[mode] += latency_lookups + done
            cpu[mode] += tree.total() - cpu_start
    other_share = other_cpu_share(machine_start, tree_start, tree.total(), wall_start)

    report: dict[str, Any] = {
        "tracking_uri": cfg_on.mlflow.tracking_uri,
        "sample_rate": cfg_on.mlflow.sample_rate,
        "threads": threads,
        "seconds": seconds,
        "rounds": rounds,
        "flushed": flushed,
        "other_cpu_share": other_share,
    }
    for mode in ("off", "on"):
        report[mode] = {
            "p50_ms": round(statistics.median(latencies[mode]), 2),
            "p95_ms": round(percentile(latencies[mode], 0.95), 2),
            "lookups_per_s": round(saturated[mode][0] / saturated[mode][1], 2),
            "cpu_ms_per_lookup": round(cpu[mode] * 1000.0 / lookups[mode], 2),
            "lookups": lookups[mode],
            "drain_s": round(drain_s[mode], 2),
        }
    report["throughput_cost"] = round(1.0 - report["on"]["lookups_per_s"] / report["off"]["lookups_per_s"], 4)
    report["p50_overhead"] = round(report["on"]["p50_ms"] / report["off"]["p50_ms"] - 1.0, 4)
    report["cpu_ms_per_trace"] = round(report["on"]["cpu_ms_per_lookup"] - report["off"]["cpu_ms_per_lookup"], 2)
    report["within_limit"] = report["throughput_cost"] <= THROUGHPUT_LIMIT
    report["trace_cpu_ms"] = trace_cost(services["on"], queries) if trace_parts else None
    for line in format_tracing_figures(report):
        out(line)
    return report


def format_tracing_figures(r: dict[str, Any]) -> list[str]:
    verdict = "within" if r["within_limit"] else "OVER"
    lines = [
        f"MLflow tracing off vs on ({r['tracking_uri']}, mlflow.sample_rate={r.get('sample_rate')}; "
        f"{r['rounds']} alternating rounds, saturation "
        f"{r['threads']} threads x {r['seconds']:g} s per mode and round, trace writing included)"
    ]
    for mode in ("off", "on"):
        m = r[mode]
        lines.append(
            f"  tracing {mode:<3}  saturated {m['lookups_per_s']:6.1f} lookups/s   CPU {m['cpu_ms_per_lookup']:6.1f} ms "
            f"per lookup (all processes)   p50 {m['p50_ms']:6.1f} ms   p95 {m['p95_ms']:6.1f} ms   [{m['lookups']} lookups, "
            f"{m.get('drain_s', 0.0):.2f} s waiting for traces]"
        )
    lines.append(
        f"  tracing costs {r['throughput_cost'] * 100:+.1f}% of saturated throughput ({verdict} the "
        f"{THROUGHPUT_LIMIT:.0%} limit), {r['cpu_ms_per_trace']:+.1f} ms CPU per lookup, p50 {r['p50_overhead'] * 100:+.1f}%"
    )
    if r.get("trace_cpu_ms"):
        t = r["trace_cpu_ms"]
        lines.append(
            f"  one trace, CPU in this process: build {t['build_ms']:.2f} ms, spans {t['spans_ms']:.2f} ms, "
            f"written by MLflow's queue {t['write_ms']:.2f} ms"
        )
    lines.append(f"  {format_other_cpu(r['other_cpu_share'])}")
    return lines


def small_kb_config(overrides: Sequence[str], work: Path, kb: str | Path) -> DictConfig:
    """
    The config of `overrides` writing everything under `work` and indexing `kb`; an MLflow tracking
    server named in the overrides is kept (a sqlite store is replaced by one under `work`).
    """
    from pipelines.bench.corpus import load_bench_config
    from pipelines.config.settings import load_config

    mlflow = load_config(overrides).mlflow
    bench = load_bench_config(overrides, work / "state", Path(kb).resolve())
    if mlflow.tracking_uri and not str(mlflow.tracking_uri).startswith("sqlite:"):
        bench.mlflow.tracking_uri = mlflow.tracking_uri  # a server: kept as given
        bench.mlflow.artifact_location = mlflow.artifact_location
    bench.mlflow.sample_rate = mlflow.sample_rate
    return bench


def main(argv: Sequence[str] | None = None) -> int:
    from pipelines.indexing import run_indexing

    parser = argparse.ArgumentParser(
        prog="python -m pipelines.bench.tracing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kb", default="knowledge", help="markdown folder to index (default: knowledge/)")
    parser.add_argument("--threads", type=int, default=2, help="threads calling lookup back to back")
    parser.add_argument("--seconds", type=float, default=4.0, help="saturation time per mode and round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating off/on rounds")
    parser.add_argument("--server", action="store_true", help="trace to an `mlflow server` started here")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="knowledge-bench-tracing-") as tmp:
        work = Path(tmp)
        cfg = small_kb_config(args.overrides, work, args.kb)
        run_indexing(cfg, rebuild=True)
        with contextlib.ExitStack() as stack:
            server_pid = None
            if args.server:
                cfg.mlflow.tracking_uri, server_pid = stack.enter_context(mlflow_server(work))
                cfg.mlflow.artifact_location = None
            report = compare_tracing_overhead(
                cfg, threads=args.threads, seconds=args.seconds, rounds=args.rounds, server_pid=server_pid
            )
    return 0 if report["within_limit"] else 1


if __name__ == "__main__":
    sys.exit(main())
