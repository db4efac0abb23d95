"""
Lookup latency with MLflow tracing off vs on, in the same run (to be wired into
`knowledge bench lookup`).

Two `LookupService`s over the same index and trace database, one with `mlflow.tracking_uri`
null and one with MLflow on, timed in alternating blocks so both see the same machine load. Both
record their `tool_invocation` row (that is not optional); the difference is the MLflow trace.

    python -m pipelines.tracing_bench [--lookups N] [--block B] [key=value ...]
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
    Time `n` lookups with MLflow off and `n` with it on, interleaved in blocks of `block`.

    MLflow on uses `cfg.mlflow.tracking_uri`, or the default sqlite store under the state folder
    when the config has MLflow off. Returns and prints p50/p95 of each and the p50 overhead.
    """
    from components.trace_mlflow import flush_all
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

    timings: dict[str, list[float]] = {"off": [], "on": []}
    block_ratios: list[float] = []
    position = 0
    while min(len(v) for v in timings.values()) < n:
        medians = {}
        for mode in ("off", "on"):
            times = []
            for _ in range(min(block, n - len(timings[mode]))):
                query = queries[position % len(queries)]
                position += 1
                start = time.perf_counter()
                services[mode].lookup(query)
                times.append((time.perf_counter() - start) * 1000.0)
            timings[mode] += times
            medians[mode] = statistics.median(times) if times else None
        if medians["off"] and medians["on"]:
            block_ratios.append(medians["on"] / medians["off"])
    flush_start = time.perf_counter()
    flushed = flush_all()
    flush_s = time.perf_counter() - flush_start

    report: dict[str, Any] = {"n": n, "block": block, "tracking_uri": cfg_on.mlflow.tracking_uri}
    for mode, values in timings.items():
        report[mode] = {"p50_ms": statistics.median(values), "p95_ms": _p(values, 0.95), "mean_ms": statistics.fmean(values)}
    report["overhead_p50"] = report["on"]["p50_ms"] / report["off"]["p50_ms"] - 1.0
    # Each "on" block against the "off" block just before it: robust to load that drifts during the run.
    report["overhead_paired_blocks"] = statistics.median(block_ratios) - 1.0 if block_ratios else None
    report["within_limit"] = report["overhead_p50"] <= LIMIT
    report["flush_s"] = flush_s
    report["flushed"] = flushed
    out(f"lookup latency, MLflow tracing off vs on ({report['tracking_uri']}; {n} lookups each, alternating blocks of {block})")
    for mode in ("off", "on"):
        r = report[mode]
        out(f"  tracing {mode:<3}  p50 {r['p50_ms']:7.1f} ms   p95 {r['p95_ms']:7.1f} ms   mean {r['mean_ms']:7.1f} ms")
    verdict = "within" if report["within_limit"] else "OVER"
    paired = report["overhead_paired_blocks"] if report["overhead_paired_blocks"] is not None else float("nan")
    out(f"  p50 overhead {report['overhead_p50'] * 100:+.1f}% ({verdict} the {LIMIT:.0%} limit); median of paired "
        f"block ratios {paired * 100:+.1f}%; remaining traces flushed in {flush_s:.2f} s")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    from pipelines.settings import load_config

    parser = argparse.ArgumentParser(prog="python -m pipelines.tracing_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lookups", type=int, default=60, help="timed lookups per mode")
    parser.add_argument("--block", type=int, default=10, help="lookups per block before switching mode")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    report = compare_tracing_overhead(load_config(args.overrides), n=args.lookups, block=args.block)
    return 0 if report["within_limit"] else 1


if __name__ == "__main__":
    sys.exit(main())
