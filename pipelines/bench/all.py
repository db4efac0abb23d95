"""
`knowledge bench all`: every benchmark in one run, one table of figures against their floors and
targets, written as JSON (`--output`) and logged as one MLflow run (the README's Benchmarks section says what each part measures).

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

from pipelines.bench.machine import OtherCpu, call_ms, format_other_cpu, load_average, peak_rss_mb, percentile
from pipelines.settings import milvus_auth

PARTS = ("index", "lookup", "sidecar", "serve", "scale", "cold_start")
EXPERIMENT = "lookup-knowledge-bench"
SIDECAR_RATIO_TARGET = 1.2
TABLE_HEADER = ("part", "figure", "value", "floor / reference", "ratio", "target", "verdict")


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


def _verdict(meets: bool | None) -> str:
    return "-" if meets is None else "meets" if meets else "MISSES"


def _row(part, figure, value, reference="-", ratio=None, target="-", meets=None) -> dict[str, Any]:
    return {
        "part": part,
        "figure": figure,
        "value": value,
        "reference": reference,
        "ratio": None if ratio is None else round(ratio, 3),
        "target": target,
        "verdict": _verdict(meets),
    }


def _index_rows(f: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        _row(
            "index",
            f"throughput, {f['chunks']} chunks",
            f"{f['pipeline_chunks_per_s']:.1f} chunks/s",
            f"bare encode {f['bare_chunks_per_s']:.1f} chunks/s",
            f["ratio"],
            f">= {f['target_ratio']}",
            f["meets_target"],
        )
    ]


def _lookup_rows(f: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for path, p in f["paths"].items():
        rows.append(
            _row(
                "lookup",
                f"{path} p50 / p95, {f['chunks']} chunks",
                f"{p['pipeline']['p50_ms']:.1f} / {p['pipeline']['p95_ms']:.1f} ms",
                f"floor {p['floor']['p50_ms']:.1f} / {p['floor']['p95_ms']:.1f} ms",
                p["p50_ratio"],
                f"<= {p['target_p50_ratio']}",
                p["meets_target"],
            )
        )
        if "hybrid_floor" in p:
            rows.append(
                _row(
                    "lookup",
                    f"{path} p50 vs the hybrid floor",
                    f"{p['pipeline']['p50_ms']:.1f} ms",
                    f"embedding + dense + BM25 {p['hybrid_floor']['p50_ms']:.1f} ms",
                    p["hybrid_p50_ratio"],
                    f"<= {p['hybrid_target_p50_ratio']}",
                    p["meets_hybrid_target"],
                )
            )
        if "stock_hybrid" in p:
            rows.append(
                _row(
                    "lookup",
                    f"{path} p50 vs the stock Haystack hybrid (a peer)",
                    f"{p['pipeline']['p50_ms']:.1f} ms",
                    f"dense + BM25 retrievers + DocumentJoiner {p['stock_hybrid']['p50_ms']:.1f} ms",
                    p["stock_hybrid_p50_ratio"],
                )
            )
    tracing = f.get("tracing")
    if tracing:
        rows.append(
            _row(
                "tracing",
                "lookup p50, MLflow on vs off",
                f"{tracing['on']['p50_ms']:.1f} ms",
                f"off {tracing['off']['p50_ms']:.1f} ms",
                1.0 + tracing["overhead_p50"],
                "<= 1.05",
                tracing["within_limit"],
            )
        )
    else:
        rows.append(_row("tracing", "lookup p50, MLflow on vs off", "not run (--tracing-lookups 0)"))
    return rows


def _sidecar_rows(f: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        _row(
            "sidecar",
            f"lookup p50 on vs off, {f['chunks']} chunks",
            f"{f['on']['p50_ms']:.1f} ms",
            f"off {f['off']['p50_ms']:.1f} ms",
            f["p50_ratio"],
            f"<= {f['target_p50_ratio']}",
            f["meets_target"],
        )
    ]


def _serve_rows(f: dict[str, Any]) -> list[dict[str, Any]]:
    if f["status"] != "ok":
        return [_row("serve", "served lookups", f"not run ({f['reason']})")]
    figures = f["figures"]
    single, many = figures["single"], figures["concurrent"]
    return [
        _row("serve", "errors at 8 clients", many["errors"], target="0", meets=many["errors"] == 0),
        _row(
            "serve",
            "p95 at 8 clients vs 1-client p50",
            f"{many['p95_ms']} ms",
            f"{single['p50_ms']} ms",
            round(many["p95_ms"] / single["p50_ms"], 3),
            "<= 4",
            many["p95_ms"] <= 4 * single["p50_ms"],
        ),
        _row(
            "serve",
            "HTTP overhead (p50 minus in-server lookup p50)",
            f"{figures['overhead_ms']:.1f} ms",
            target="<= 5 ms",
            meets=figures["overhead_ms"] <= 5,
        ),
    ]


def _scale_rows(f: dict[str, Any]) -> list[dict[str, Any]]:
    base, scale = f["base"], f["scale"]
    return [
        _row(
            "scale",
            f"lookup p50 at {scale['chunks']} chunks",
            f"{scale['lookup']['p50_ms']:.1f} ms",
            f"{base['lookup']['p50_ms']:.1f} ms at {base['chunks']}",
            f["p50_ratio"],
            f"<= {f['target_p50_ratio']}",
            f["meets_target"],
        ),
        _row(
            "scale",
            "insert time, peak RSS",
            f"{scale['insert_s'] + base['insert_s']:.1f} s for {scale['chunks'] - f['real_chunks']} synthetic chunks",
            f"peak RSS {f['peak_rss_mb']:.0f} MiB",
        ),
    ]


def _cold_rows(f: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        _row(
            "cold_start",
            f"one-shot knowledge lookup ({f.get('backend', 'torch')})",
            f"{f['lookup_median_s']:.2f} s",
            f"{f.get('bare_import_label', 'bare imports')} {f['bare_import_median_s']:.2f} s",
            f["ratio"],
            f"<= {f['target_ratio']}",
            f["meets_target"],
        )
    ]


ROWS: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "index": _index_rows,
    "lookup": _lookup_rows,
    "sidecar": _sidecar_rows,
    "serve": _serve_rows,
    "scale": _scale_rows,
    "cold_start": _cold_rows,
}


def table_rows(parts: dict[str, Any]) -> list[dict[str, Any]]:
    """One or more rows per part, in `PARTS` order; a skipped part is one row that says so."""
    rows = []
    for part in PARTS:
        figures = parts.get(part)
        rows += ROWS[part](figures) if figures is not None else [_row(part, "-", "skipped (--skip)")]
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    cells = [TABLE_HEADER] + [
        (
            r["part"],
            r["figure"],
            r["value"],
            r["reference"],
            "-" if r["ratio"] is None else f"{r['ratio']:.3f}",
            r["target"],
            r["verdict"],
        )
        for r in rows
    ]
    widths = [max(len(str(line[i])) for line in cells) for i in range(len(TABLE_HEADER))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells)


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
        from components.stores.milvus_collection import connect, row_count

        echo(f"sidecar overhead: {options.sidecar_lookups} lookups per mode")
        figures = sidecar_overhead(bench_cfg, options.sidecar_lookups)
        return {
            **figures,
            "chunks": row_count(
                connect(bench_cfg.milvus.uri, auth=milvus_auth(bench_cfg)), bench_cfg.milvus.collection
            ),
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
        parts["cold_start"] = bench_cold_start(options.cold_runs, echo=echo, backend=cfg.embedder.backend)
    return parts


def bench_all(
    overrides: Sequence[str], options: BenchAllOptions, echo: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """
    Run every part not skipped; returns the figures by part, the table rows and the MLflow run id.
    Each part composes its own config from `overrides` (see `pipelines.bench.corpus.bench_overrides`);
    the serve part and the MLflow run use the config of `overrides` alone.
    """
    from pipelines.settings import load_config

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

    from pipelines.compare import experiment_id_for

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
