"""
The one table of `knowledge bench all`: a row per figure against its floor or reference, its ratio,
target and verdict (docs/benchmarks.md says what each part measures).
"""

from collections.abc import Callable
from typing import Any

from components.common.embedding_models import PACKAGED_PREFIX

PARTS = ("index", "lookup", "sidecar", "serve", "scale", "cold_start")
TABLE_HEADER = ("part", "figure", "value", "floor / reference", "ratio", "target", "verdict")


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
        if "too_few_cases" in p:
            # Too few distinct queries took the path for its latency to say anything: no ratio, no verdict.
            value = f"not measured: {p['too_few_cases']} distinct crafted queries ({p['min_cases']} needed)"
            rows.append(_row("lookup", f"{path}, {f['chunks']} chunks", value))
            continue
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
            f"one-shot knowledge lookup ({f.get('backend', 'torch')}{_model_label(f)})",
            f"{f['lookup_median_s']:.2f} s",
            f"{f.get('bare_import_label', 'bare imports')} {f['bare_import_median_s']:.2f} s",
            f["ratio"],
            f"<= {f['target_ratio']}",
            f["meets_target"],
        )
    ]


def _model_label(f: dict[str, Any]) -> str:
    """The model the cold start ran, when it is not the packaged one."""
    model = f.get("model") or ""
    return f", {model}" if model and not model.startswith(PACKAGED_PREFIX) else ""


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
