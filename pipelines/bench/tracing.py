"""
Lookup latency with MLflow tracing off vs on, in the same run (to be wired into
`knowledge bench lookup`).

Two `LookupService`s over the same index and trace database, one with `mlflow.tracking_uri`
null and one with MLflow on, timed in alternating blocks so both see the same machine load. Both
record their `tool_invocation` row (that is not optional); the difference is the MLflow trace.
After each "on" block the bench waits for its traces to be written (untimed): that pause is
where the export, which yields to lookups, does its work.

    python -m pipelines.bench.tracing [--lookups N] [--block B] [key=value ...]
"""

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from omegaconf import DictConfig

DEFAULT_QUERIES = (
    "disk almost full on a worker node",
    "postgres replica lag",
    "certificate expiry",
    "runaway process high cpu",
    "inode exhaustion df -i",
    "how to bake sourdough bread",
)
LIMIT = 0.05


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def compare_tracing_overhead(
    cfg: DictConfig,
    queries: Sequence[str] = DEFAULT_QUERIES,
    n: int = 60,
    block: int = 10,
    out: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """
    Time `n` lookups with MLflow off and `n` with it on, in alternating blocks of `block`
    (off-on, on-off, ...).

    MLflow on uses `cfg.mlflow.tracking_uri`, or the default sqlite store under the state folder
    when the config has MLflow off. Returns and prints p50/p95 of each and the p50 overhead, and,
    as a figure that other processes on a shared machine do not blur, the CPU time of this process
    per lookup in each mode (the "on" side includes the feeder thread's work, drained after each
    block) and the export process's CPU per trace.
    """
    import psutil

    from components.tracing.mlflow_sink import flush_all, get_sink
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
    flush_all()
    sink = get_sink(cfg_on.mlflow.tracking_uri, cfg_on.mlflow.experiment)
    child = psutil.Process(sink._process.pid) if sink._process is not None else None

    def child_cpu() -> float:
        try:
            return sum(child.cpu_times()[:2]) if child is not None else 0.0
        except psutil.Error:
            return 0.0

    timings: dict[str, list[float]] = {"off": [], "on": []}
    cpu = {"off": 0.0, "on": 0.0}
    block_ratios: list[float] = []
    position = 0
    flush_s = 0.0
    child_start = child_cpu()
    pair = 0
    while min(len(v) for v in timings.values()) < n:
        medians = {}
        # ABBA order: neither mode always runs first after a pause.
        order = ("off", "on") if pair % 2 == 0 else ("on", "off")
        pair += 1
        for mode in order:
            times = []
            cpu_start = time.process_time()
            for _ in range(min(block, n - len(timings[mode]))):
                query = queries[position % len(queries)]
                position += 1
                start = time.perf_counter()
                services[mode].lookup(query)
                times.append((time.perf_counter() - start) * 1000.0)
            if mode == "on":  # the block's traces leave before the next "off" block starts
                flush_start = time.perf_counter()
                flush_all()
                flush_s += time.perf_counter() - flush_start
            cpu[mode] += time.process_time() - cpu_start
            timings[mode] += times
            medians[mode] = statistics.median(times) if times else None
        if medians["off"] and medians["on"]:
            block_ratios.append(medians["on"] / medians["off"])
    export_cpu = child_cpu() - child_start
    flushed = flush_all()

    report: dict[str, Any] = {"n": n, "block": block, "tracking_uri": cfg_on.mlflow.tracking_uri}
    for mode, values in timings.items():
        report[mode] = {
            "p50_ms": statistics.median(values),
            "p95_ms": _p(values, 0.95),
            "mean_ms": statistics.fmean(values),
        }
    report["overhead_p50"] = report["on"]["p50_ms"] / report["off"]["p50_ms"] - 1.0
    # Each "on" block against the "off" block just before it: robust to load that drifts during the run.
    report["overhead_paired_blocks"] = statistics.median(block_ratios) - 1.0 if block_ratios else None
    report["within_limit"] = report["overhead_p50"] <= LIMIT
    report["flush_s"] = flush_s
    report["flushed"] = flushed
    report["cpu_ms_per_lookup"] = {mode: cpu[mode] * 1000.0 / len(timings[mode]) for mode in cpu}
    report["overhead_cpu"] = cpu["on"] / cpu["off"] - 1.0 if cpu["off"] else None
    report["export_cpu_ms_per_trace"] = export_cpu * 1000.0 / len(timings["on"])
    out(
        f"lookup latency, MLflow tracing off vs on ({report['tracking_uri']}; {n} lookups each, alternating blocks of {block}, ABBA)"
    )
    for mode in ("off", "on"):
        r = report[mode]
        out(f"  tracing {mode:<3}  p50 {r['p50_ms']:7.1f} ms   p95 {r['p95_ms']:7.1f} ms   mean {r['mean_ms']:7.1f} ms")
    verdict = "within" if report["within_limit"] else "OVER"
    paired = report["overhead_paired_blocks"] if report["overhead_paired_blocks"] is not None else float("nan")
    out(
        f"  p50 overhead {report['overhead_p50'] * 100:+.1f}% ({verdict} the {LIMIT:.0%} limit); median of paired "
        f"block ratios {paired * 100:+.1f}%"
    )
    cpu_ms = report["cpu_ms_per_lookup"]
    out(
        f"  CPU of this process per lookup: off {cpu_ms['off']:.1f} ms, on {cpu_ms['on']:.1f} ms "
        f"({(report['overhead_cpu'] or 0) * 100:+.1f}%); export process (nice, separate) "
        f"{report['export_cpu_ms_per_trace']:.1f} ms per trace; waited {flush_s:.2f} s for exports between blocks"
    )
    return report


def main(argv: Sequence[str] | None = None) -> int:
    from pipelines.settings import load_config

    parser = argparse.ArgumentParser(
        prog="python -m pipelines.bench.tracing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--lookups", type=int, default=60, help="timed lookups per mode")
    parser.add_argument("--block", type=int, default=10, help="lookups per block before switching mode")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    report = compare_tracing_overhead(load_config(args.overrides), n=args.lookups, block=args.block)
    return 0 if report["within_limit"] else 1


if __name__ == "__main__":
    sys.exit(main())
