"""
`knowledge bench all`: every benchmark in one run, one table of figures against their floors and
targets, written as JSON (`--output`) and logged as one MLflow run (docs/benchmarks.md says what each part measures).

    figures = bench_all(["milvus=server"], BenchAllOptions(min_chunks=500, scale_chunks=20_000, skip=("serve",)))
    print(format_table(figures["table"]))
"""

import copy
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from components.common.stats import percentile
from pipelines.bench.all_table import PARTS, format_table, table_rows
from pipelines.bench.machine import OtherCpu, call_ms, format_other_cpu, load_average, peak_rss_mb
from pipelines.config.settings import knowledge_store

EXPERIMENT = "lookup-knowledge-bench"
SIDECAR_RATIO_TARGET = 1.2


@dataclass
class BenchAllOptions:
    """Sizes of each part; the defaults are the full run, tests pass tiny ones."""

    corpus: str | None = None
    min_chunks: int = 2000
    lookup_queries: int = 40
    tracing_lookups: int = 40
    index_rounds: int = 2
    sidecar_lookups: int = 40
    base_chunks: int = 10_000
    scale_chunks: int = 100_000
    scale_lookups: int = 40
    cold_runs: int = 3
    serve_url: str | None = None
    skip: tuple[str, ...] = field(default_factory=tuple)


def sidecar_overhead(cfg: DictConfig, lookups: int = 40, block: int = 10) -> dict[str, Any]:
    """
    Lookup latency with the sidecar off vs on, over the same collection in the same process,
    timed in alternating blocks (ABBA) so both see the same machine load.
    """
    from pipelines.bench.scale import SCALE_QUERIES
    from pipelines.lookup import LookupService

    services = {}
    for mode, enabled in (("off", False), ("on", True)):
        mode_cfg = copy.deepcopy(cfg)
        mode_cfg.sidecar.enabled = enabled
        services[mode] = LookupService(mode_cfg)
        services[mode].warm_up()
        for query in SCALE_QUERIES[:3]:  # untimed: first calls open the other path's client
            services[mode].lookup(query)
    samples: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    position = 0
    with OtherCpu() as other:
        while min(len(v) for v in samples.values()) < lookups:
            order = ("off", "on") if position // block % 2 == 0 else ("on", "off")
            for mode in order:
                for _ in range(min(block, lookups - len(samples[mode]))):
                    query = SCALE_QUERIES[position % len(SCALE_QUERIES)]
                    samples[mode].append(call_ms(lambda s=services[mode], q=query: s.lookup(q)))
            position += block
    report: dict[str, Any] = {"lookups": lookups, "block": block, "other_cpu_share": other.share}
    for mode, values in samples.items():
        report[mode] = {
            "p50_ms": round(percentile([w for w, _ in values], 0.5), 2),
            "p95_ms": round(percentile([w for w, _ in values], 0.95), 2),
            "cpu_p50_ms": round(percentile([c for _, c in values], 0.5), 2),
        }
    ratio = report["on"]["p50_ms"] / report["off"]["p50_ms"]
    report.update(
        p50_ratio=round(ratio, 3),
        cpu_p50_ratio=round(report["on"]["cpu_p50_ms"] / report["off"]["cpu_p50_ms"], 3),
        target_p50_ratio=SIDECAR_RATIO_TARGET,
        meets_target=ratio <= SIDECAR_RATIO_TARGET,
    )
    return report


def serve_figures(cfg: DictConfig, serve_url: str | None, echo: Callable[[str], None]) -> dict[str, Any]:
    """`knowledge bench serve` against a running server (started with the same overrides), when a URL is given."""
    if not serve_url:
        return {"status": "not run", "reason": "no --serve-url"}
    from pipelines.bench.serve_bench import bench_serve

    echo(f"bench serve against {serve_url}")
    return {"status": "ok", "figures": bench_serve(cfg, serve_url)}


def _run_parts(
    cfg: DictConfig, overrides: Sequence[str], options: BenchAllOptions, echo: Callable[[str], None]
) -> dict[str, Any]:
    from pipelines.bench.cold_start import bench_cold_start
    from pipelines.bench.index_bench import bench_index
    from pipelines.bench.lookup_bench import bench_lookup
    from pipelines.bench.scale import bench_scale, sample_collection

    wanted = [part for part in PARTS if part not in options.skip]
    parts: dict[str, Any] = {}
    if "index" in wanted:
        parts["index"] = bench_index(
            overrides, corpus=options.corpus, min_chunks=options.min_chunks, rounds=options.index_rounds, echo=echo
        )
    if "lookup" in wanted:
        parts["lookup"] = bench_lookup(
            overrides,
            corpus=options.corpus,
            min_chunks=options.min_chunks,
            queries=options.lookup_queries,
            tracing_lookups=options.tracing_lookups,
            echo=echo,
        )
    if "serve" in wanted:
        parts["serve"] = serve_figures(cfg, options.serve_url, echo)

    def sidecar_part(bench_cfg: DictConfig) -> dict[str, Any]:
        echo(f"sidecar overhead: {options.sidecar_lookups} lookups per mode")
        figures = sidecar_overhead(bench_cfg, options.sidecar_lookups)
        return {
            **figures,
            "chunks": knowledge_store(bench_cfg).row_count(),
        }

    if "scale" in wanted:
        echo(f"scale point: {options.base_chunks} then {options.scale_chunks} chunks")
        scale = bench_scale(
            overrides,
            scale_chunks=options.scale_chunks,
            base_chunks=options.base_chunks,
            lookups=options.scale_lookups,
            echo=echo,
            at_end=sidecar_part if "sidecar" in wanted else None,
        )
        sidecar = scale.pop("at_end")
        if sidecar is not None:
            parts["sidecar"] = sidecar
        parts["scale"] = scale
    elif "sidecar" in wanted:
        from pipelines.bench.scale import grow_collection

        with sample_collection(overrides, echo) as bench_cfg:
            grow_collection(bench_cfg, options.base_chunks)
            parts["sidecar"] = sidecar_part(bench_cfg)
    if "cold_start" in wanted:
        embedder = cfg.embedder
        parts["cold_start"] = bench_cold_start(
            options.cold_runs,
            echo=echo,
            backend=embedder.backend,
            model=embedder.model,
            decision_model=embedder.decision_model,
        )
    return parts


def bench_all(
    overrides: Sequence[str], options: BenchAllOptions, echo: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """
    Run every part not skipped; returns the figures by part, the table rows and the MLflow run id.
    Each part composes its own config from `overrides` (see `pipelines.bench.corpus.bench_overrides`);
    the serve part and the MLflow run use the config of `overrides` alone.
    """
    from pipelines.config.settings import load_config

    cfg = load_config(overrides)
    unknown = sorted(set(options.skip) - set(PARTS))
    if unknown:
        raise ValueError(f"--skip {', '.join(unknown)}: parts are {', '.join(PARTS)}")
    echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    started_load = load_average()
    with OtherCpu() as other:
        parts = _run_parts(cfg, overrides, options, echo)
    report = {
        "options": asdict(options),
        "parts": parts,
        "table": table_rows(parts),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_start": started_load,
            "load_avg_end": load_average(),
            "other_cpu_share": other.share,
            "other_cpu": format_other_cpu(other.share),
            "peak_rss_mb": peak_rss_mb(),
        },
        "run_id": None,
    }
    if cfg.mlflow.tracking_uri:
        report["run_id"] = log_bench_run(cfg, report)
    return report


def numeric_leaves(data: Any, prefix: str = "") -> dict[str, float]:
    """Every int/float in nested dicts as `a.b.c` -> value (booleans as 0/1); lists are left out."""
    if isinstance(data, bool):
        return {prefix: float(data)}
    if isinstance(data, int | float):
        return {prefix: float(data)}
    if isinstance(data, dict):
        leaves: dict[str, float] = {}
        for key, value in data.items():
            leaves.update(numeric_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return leaves
    return {}


def log_bench_run(cfg: DictConfig, report: dict[str, Any]) -> str:
    """One MLflow run: the options as params, every figure as a metric, the whole report as JSON."""
    import mlflow

    from pipelines.evaluation.compare import experiment_id_for

    client = mlflow.MlflowClient(cfg.mlflow.tracking_uri)
    run_id = client.create_run(experiment_id_for(client, cfg, EXPERIMENT), run_name="bench-all").info.run_id
    for key, value in report["options"].items():
        client.log_param(run_id, key, str(value))
    for key, value in numeric_leaves(report["parts"]).items():
        client.log_metric(run_id, key.replace("%", "pct"), value)
    for key, value in numeric_leaves(report["machine"]).items():
        client.log_metric(run_id, f"machine.{key}", value)
    with tempfile.TemporaryDirectory(prefix="knowledge-bench-all-") as tmp:
        path = Path(tmp) / "bench-all.json"
        path.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
        client.log_artifact(run_id, str(path))
        table = Path(tmp) / "bench-all.txt"
        table.write_text(format_table(report["table"]) + "\n", encoding="utf-8")
        client.log_artifact(run_id, str(table))
    client.set_terminated(run_id)
    return run_id


def format_report(report: dict[str, Any]) -> str:
    machine = report["machine"]
    lines = [
        format_table(report["table"]),
        "",
        f"machine: {machine['cpus']} CPUs, load average {machine['load_avg_start']} at start, "
        f"{machine['load_avg_end']} at end; {machine['other_cpu']}; peak RSS {machine['peak_rss_mb']:.0f} MiB",
    ]
    cpu_notes = []
    for part in ("sidecar", "scale"):
        figures = report["parts"].get(part)
        if figures and figures.get("cpu_p50_ratio") is not None:
            cpu_notes.append(f"{part} CPU-time p50 ratio {figures['cpu_p50_ratio']:.3f}")
    if cpu_notes:
        lines.append("less load-sensitive: " + "; ".join(cpu_notes))
    scale = report["parts"].get("scale")
    if scale:
        lines.append(f"scale point vectors: {scale['vectors']}")
    if report["run_id"]:
        lines.append(f"MLflow run {report['run_id']} (experiment {EXPERIMENT})")
    return "\n".join(lines)
