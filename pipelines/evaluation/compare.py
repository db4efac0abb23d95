"""
`knowledge compare`: the two vector-store paths (sdk and haystack) side by side over a query set,
logged as one MLflow run with aggregated agreement metrics, a per-query table and an HTML report.

    report = run_comparison(cfg, read_queries("eval/prometheus-dev.jsonl"))
    report["metrics"]["rbo_mean"], report["run_id"]
"""

import csv
import html
import io
import json
import logging
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from components.lookup.sidecar_comparator import RBO_P, comparable, compare

logger = logging.getLogger(__name__)

EXPERIMENT = "lookup-knowledge-compare"
PATHS = ("sdk", "haystack")
TABLE_COLUMNS = (
    "id",
    "query",
    "sdk_hits",
    "haystack_hits",
    "overlap_at_k",
    "jaccard",
    "rbo",
    "top1_agreement",
    "max_rank_shift",
    "mean_similarity_gap",
    "max_similarity_gap",
    "sdk_top1",
    "haystack_top1",
    "sdk_top1_similarity",
    "haystack_top1_similarity",
    "sdk_top1_raw",
    "haystack_top1_raw",
)


class QueryFileError(ValueError):
    """The query file cannot be read or has no usable query."""


def read_queries(path: str | Path) -> list[dict[str, str]]:
    """Queries of a JSONL file (`query`, optional `id`), one object a line; blank lines are skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise QueryFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    queries = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            query = item["query"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise QueryFileError(f"{path}:{number}: not a JSON object with a 'query' field ({exc})") from exc
        if not isinstance(query, str) or not query.strip():
            raise QueryFileError(f"{path}:{number}: 'query' must be a non-empty string")
        queries.append({"id": str(item.get("id") or f"q{number}"), "query": query})
    if not queries:
        raise QueryFileError(f"{path}: no queries")
    return queries


def compare_query(embedding, searches: dict[str, Any], top_k: int) -> dict[str, Any]:
    """Both paths' top_k for one query embedding, unfiltered, and their comparison."""
    rows = {path: comparable(searches[path].search(embedding, top_k, None), top_k) for path in PATHS}
    return {"results": rows, "comparison": compare(rows["sdk"], rows["haystack"])}


def table_row(item: dict[str, str], compared: dict[str, Any]) -> dict[str, Any]:
    """One line of the per-query table."""
    sdk, haystack = compared["results"]["sdk"], compared["results"]["haystack"]
    c = compared["comparison"]

    def first(rows: list[dict[str, Any]], key: str) -> Any:
        return rows[0][key] if rows else None

    return {
        "id": item["id"],
        "query": item["query"],
        "sdk_hits": len(sdk),
        "haystack_hits": len(haystack),
        "overlap_at_k": c["overlap_at_k"],
        "jaccard": c["jaccard"],
        "rbo": c["rbo"],
        "top1_agreement": c["same_top1"],
        "max_rank_shift": c["max_rank_shift"],
        "mean_similarity_gap": c["mean_similarity_gap"],
        "max_similarity_gap": c["max_similarity_gap"],
        "sdk_top1": first(sdk, "source"),
        "haystack_top1": first(haystack, "source"),
        "sdk_top1_similarity": first(sdk, "similarity"),
        "haystack_top1_similarity": first(haystack, "similarity"),
        "sdk_top1_raw": first(sdk, "score_value"),
        "haystack_top1_raw": first(haystack, "score_value"),
    }


def aggregate(rows: Sequence[dict[str, Any]], details: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Run-level metrics: means over queries, and the similarity and raw-score figures by path."""
    gaps = _similarity_gaps(details)
    metrics = {"queries": float(len(rows)), **_agreement(rows), **gaps}
    for path in PATHS:
        metrics.update(_path_means(details, path))
    return {key: round(value, 6) for key, value in metrics.items()}


def _agreement(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """How far the two paths' rankings agree, over the queries."""
    return {
        "overlap_at_k_mean": statistics.fmean(r["overlap_at_k"] for r in rows),
        "jaccard_mean": statistics.fmean(r["jaccard"] for r in rows),
        "rbo_mean": statistics.fmean(r["rbo"] for r in rows),
        "rbo_min": min(r["rbo"] for r in rows),
        "top1_agreement_rate": statistics.fmean(1.0 if r["top1_agreement"] else 0.0 for r in rows),
    }


def _similarity_gaps(details: Sequence[dict[str, Any]]) -> dict[str, float]:
    """How far the two paths' similarities of the same chunk differ."""
    gaps = [
        abs(by_key["sdk"][key]["similarity"] - by_key["haystack"][key]["similarity"])
        for by_key in (_rows_by_key(d) for d in details)
        for key in by_key["sdk"].keys() & by_key["haystack"].keys()
    ]
    return {
        "similarity_abs_diff_mean": statistics.fmean(gaps) if gaps else 0.0,
        "similarity_abs_diff_max": max(gaps, default=0.0),
    }


def _path_means(details: Sequence[dict[str, Any]], path: str) -> dict[str, float]:
    hits = [h for d in details for h in d["results"][path]]
    return {
        f"{path}_similarity_mean": statistics.fmean(h["similarity"] for h in hits) if hits else 0.0,
        f"{path}_raw_score_mean": statistics.fmean(h["score_value"] for h in hits) if hits else 0.0,
    }


def _rows_by_key(compared: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    return {path: {r["evidence_key"]: r for r in compared["results"][path]} for path in PATHS}


def score_labels(details: Sequence[dict[str, Any]]) -> dict[str, str]:
    """What each path's raw score is (e.g. the L2 squared distance), from the first hit seen."""
    labels = {}
    for path in PATHS:
        labels[path] = next((r["score_label"] for d in details for r in d["results"][path]), "none")
    return labels


def table_csv(rows: Sequence[dict[str, Any]]) -> str:
    stream = io.StringIO()
    writer = csv.DictWriter(stream, fieldnames=TABLE_COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    return stream.getvalue()


_STYLE = """
body { font-family: sans-serif; margin: 1.5em; } table { border-collapse: collapse; margin-bottom: 1.5em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.5em; font-size: 0.9em; } th { background: #eee; }
.same { background: #e6f4e6; } .differ { background: #fbeaea; } .num { text-align: right; }
"""


def _hit_cells(hit: dict[str, Any] | None) -> str:
    if hit is None:
        return "<td>-</td><td>-</td><td>-</td>"
    return (
        f"<td>{html.escape(hit['source'])}</td><td class='num'>{hit['similarity']:.4f}</td>"
        f"<td class='num'>{hit['score_value']:.4f}</td>"
    )


def query_section(item: dict[str, str], compared: dict[str, Any], labels: dict[str, str]) -> str:
    """One query's side-by-side table: rank, source, similarity and raw score per path, agreement."""
    sdk, haystack = compared["results"]["sdk"], compared["results"]["haystack"]
    c = compared["comparison"]
    lines = [
        f"<h2>{html.escape(item['id'])}: {html.escape(item['query'])}</h2>",
        f"<p>overlap@k {c['overlap_at_k']:.2f}, Jaccard {c['jaccard']:.2f}, RBO {c['rbo']:.3f}, "
        f"top-1 {'agrees' if c['same_top1'] else 'differs'}, max |similarity difference| "
        f"{c['max_similarity_gap']:.2e}</p>",
        "<table><tr><th>rank</th><th>sdk source</th><th>sdk similarity</th>"
        f"<th>sdk {html.escape(labels['sdk'])}</th><th>haystack source</th><th>haystack similarity</th>"
        f"<th>haystack {html.escape(labels['haystack'])}</th><th>agreement</th></tr>",
    ]
    for rank in range(max(len(sdk), len(haystack))):
        left = sdk[rank] if rank < len(sdk) else None
        right = haystack[rank] if rank < len(haystack) else None
        same = left is not None and right is not None and left["evidence_key"] == right["evidence_key"]
        agreement = "same chunk" if same else "differs"
        lines.append(
            f"<tr class='{'same' if same else 'differ'}'><td>{rank + 1}</td>{_hit_cells(left)}"
            f"{_hit_cells(right)}<td>{agreement}</td></tr>"
        )
    lines.append("</table>")
    return "\n".join(lines)


def html_report(
    items: Sequence[dict[str, str]], details: Sequence[dict[str, Any]], metrics: dict[str, float], top_k: int
) -> str:
    """The whole report as one self-contained HTML page."""
    labels = score_labels(details)
    summary = "".join(f"<tr><td>{html.escape(k)}</td><td class='num'>{v:.4f}</td></tr>" for k, v in metrics.items())
    sections = "\n".join(query_section(i, d, labels) for i, d in zip(items, details, strict=True))
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Vector path comparison</title>"
        f"<style>{_STYLE}</style></head><body><h1>sdk vs haystack vector path, top {top_k}</h1>"
        f"<p>Raw scores: sdk = {html.escape(labels['sdk'])}, haystack = {html.escape(labels['haystack'])}. "
        "Similarity is the same normalization on both paths, so it is the comparable figure. "
        f"RBO with p = {RBO_P}.</p><table><tr><th>metric</th><th>value</th></tr>{summary}</table>"
        f"{sections}</body></html>"
    )


def compare_paths(cfg: DictConfig, items: Sequence[dict[str, str]], top_k: int) -> list[dict[str, Any]]:
    """Embed each query once (the pipeline's query embedder) and search both paths with it."""
    from components.lookup.query_embedder import KnowledgeQueryEmbedder
    from pipelines.config.settings import embedder_params, knowledge_store

    store = knowledge_store(cfg)
    searches = {path: store.vector_search(path) for path in PATHS}
    embedder = KnowledgeQueryEmbedder(**embedder_params(cfg))
    embedder.warm_up()
    details = []
    for item in items:
        embedding = embedder.run(query=item["query"])["query_embedding"]
        details.append(compare_query(embedding, searches, top_k))
    return details


def log_run(cfg: DictConfig, report: dict[str, Any], html_text: str, experiment: str) -> str:
    """One MLflow run: params, metrics, the per-query table (CSV and JSON) and the HTML report."""
    import mlflow

    client = mlflow.MlflowClient(cfg.mlflow.tracking_uri)
    experiment_id = experiment_id_for(client, cfg, experiment)
    run = client.create_run(experiment_id, run_name="compare", tags={"kind": "vector-path-comparison"})
    run_id = run.info.run_id
    params = {
        "queries_file": report["queries_file"],
        "top_k": report["top_k"],
        "collection": cfg.milvus.collection,
        "milvus_uri": cfg.milvus.uri,
        "index_type": cfg.milvus.index_type,
        "rbo_p": RBO_P,
        **{f"{path}_score_label": label for path, label in report["score_labels"].items()},
    }
    for key, value in params.items():
        client.log_param(run_id, key, str(value))
    for key, value in report["metrics"].items():
        client.log_metric(run_id, key, value)
    with tempfile.TemporaryDirectory(prefix="knowledge-compare-") as tmp:
        folder = Path(tmp)
        (folder / "comparison.csv").write_text(table_csv(report["table"]), encoding="utf-8")
        (folder / "comparison.json").write_text(json.dumps(report["details"], indent=1), encoding="utf-8")
        (folder / "comparison.html").write_text(html_text, encoding="utf-8")
        for name in ("comparison.csv", "comparison.json", "comparison.html"):
            client.log_artifact(run_id, str(folder / name))
    client.set_terminated(run_id)
    return run_id


def experiment_id_for(client, cfg: DictConfig, experiment: str) -> str:
    """The experiment's id, created on first use with its artifacts under `mlflow.artifact_location`."""
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        return found.experiment_id
    base = cfg.mlflow.get("artifact_location")
    return client.create_experiment(experiment, artifact_location=f"{base}/{experiment}" if base else None)


def run_comparison(
    cfg: DictConfig,
    items: Sequence[dict[str, str]],
    queries_file: str = "",
    top_k: int | None = None,
    experiment: str = EXPERIMENT,
) -> dict[str, Any]:
    """Compare both paths over `items`, log the MLflow run (when `mlflow.tracking_uri` is set), return the report."""
    top_k = int(top_k or cfg.retrieval.top_k)
    details = compare_paths(cfg, items, top_k)
    table = [table_row(item, compared) for item, compared in zip(items, details, strict=True)]
    for item, compared in zip(items, details, strict=True):
        compared.update(id=item["id"], query=item["query"])
    metrics = aggregate(table, details)
    report: dict[str, Any] = {
        "queries_file": str(queries_file),
        "top_k": top_k,
        "metrics": metrics,
        "score_labels": score_labels(details),
        "table": table,
        "details": details,
        "run_id": None,
        "tracking_uri": cfg.mlflow.tracking_uri,
        "experiment": experiment,
    }
    if cfg.mlflow.tracking_uri:
        report["run_id"] = log_run(cfg, report, html_report(items, details, metrics, top_k), experiment)
    else:
        logger.warning("mlflow.tracking_uri is null: the comparison is printed, not logged")
    return report


def format_summary(report: dict[str, Any]) -> str:
    m = report["metrics"]
    labels = report["score_labels"]
    lines = [
        f"sdk vs haystack over {int(m['queries'])} queries, top {report['top_k']} (unfiltered)",
        f"  overlap@k {m['overlap_at_k_mean']:.3f}   Jaccard {m['jaccard_mean']:.3f}   "
        f"RBO(p={RBO_P}) mean {m['rbo_mean']:.3f} min {m['rbo_min']:.3f}   top-1 agreement {m['top1_agreement_rate']:.0%}",
        f"  |similarity difference| on shared hits: mean {m['similarity_abs_diff_mean']:.2e}, "
        f"max {m['similarity_abs_diff_max']:.2e}",
    ]
    for path in PATHS:
        lines.append(
            f"  {path:<8} mean similarity {m[f'{path}_similarity_mean']:.4f}, "
            f"mean raw score {m[f'{path}_raw_score_mean']:.4f} ({labels[path]})"
        )
    disagreeing = [r for r in report["table"] if not r["top1_agreement"]]
    for row in disagreeing[:10]:
        lines.append(f"  top-1 differs on {row['id']}: sdk {row['sdk_top1']} vs haystack {row['haystack_top1']}")
    if report["run_id"]:
        uri = report["tracking_uri"]
        lines += [
            f"MLflow run {report['run_id']} (experiment {report['experiment']}); report: artifact comparison.html",
            f"  mlflow ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000",
        ]
    return "\n".join(lines)
