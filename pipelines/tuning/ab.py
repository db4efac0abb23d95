"""
`knowledge compare --a "k=v ..." --b "k=v ..." --queries FILE`: two configs over one labelled
query set, query by query. Per metric: both values, the delta (B - A), a paired bootstrap 95%
interval of the delta and an exact two-sided sign test over the queries whose value differs
(p = 1 when none does). Lists the queries whose top source or answer changed, writes an HTML
report and logs one MLflow run with both configs as params (`a.*`, `b.*`).

Both configs share the index when they differ only in query-time keys; a config with its own
index-time keys (chunking, model, ...) is indexed into its own folder from the knowledge base
the state dir's index holds, as a sweep combination is.

    report = run_ab(["mlflow=off"], ["retrieval.evidence_threshold=0.35"], ["retrieval.evidence_threshold=0.5"],
                    load_queries("eval/prometheus-dev.jsonl"))
    report.metrics["answer_rate"]["p_value"]

See docs/tuning.md ("A/B two configs").
"""

import html
import json
import logging
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from pipelines.evaluation import EvalQuery, PipelineSystem, Ranked, evaluate, index_first
from pipelines.evaluation_metrics import first_hit, ndcg
from pipelines.manifest import indexed_kb
from pipelines.settings import ConfigError, load_config
from pipelines.tuning.runs import RunLogger, flatten_params, metric_name
from pipelines.tuning.sweep import affects_index, index_redirect

logger = logging.getLogger(__name__)

AB_EXPERIMENT = "lookup-knowledge-compare"
AB_REPORT = "ab-report.html"
BOOTSTRAP_SAMPLES = 10000
SIDES = ("a", "b")


def split_overrides(text: str | None, option: str) -> list[str]:
    """`--a "k=v k2=v2"` as override strings (shell quoting respected)."""
    try:
        overrides = shlex.split(text or "")
    except ValueError as exc:
        raise ConfigError(f"{option} {text!r}: {exc}") from exc
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ConfigError(f"{option}: {bad[0]!r} is not key=value")
    return overrides


# Per-query values of each metric: None where a metric does not apply (hit@1 of an off-topic query).
def per_query_values(query: EvalQuery, answer: Ranked) -> dict[str, float | None]:
    if not query.answerable:
        empty = dict.fromkeys(("hit@1", "hit@5", "mrr@10", "ndcg@10", "answer_rate"))
        return {**empty, "no_evidence_rate": 0.0 if answer.answered else 1.0}
    rank = first_hit(answer.sources, query.relevant, 10)
    return {
        "hit@1": 1.0 if rank == 1 else 0.0,
        "hit@5": 1.0 if rank is not None and rank <= 5 else 0.0,
        "mrr@10": 1.0 / rank if rank else 0.0,
        "ndcg@10": ndcg(answer.sources, query.relevant, 10),
        "answer_rate": 1.0 if answer.answered else 0.0,
        "no_evidence_rate": None,
    }


METRICS = ("hit@1", "hit@5", "mrr@10", "ndcg@10", "answer_rate", "no_evidence_rate")


def sign_test(deltas: np.ndarray) -> float:
    """Exact two-sided sign test of paired deltas; ties are left out, and no untied pair gives p = 1."""
    from scipy.stats import binomtest

    wins, losses = int((deltas > 0).sum()), int((deltas < 0).sum())
    if wins + losses == 0:
        return 1.0
    return float(binomtest(wins, wins + losses, 0.5).pvalue)


def bootstrap_interval(deltas: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """The 95% paired bootstrap interval of the mean delta (queries resampled with replacement)."""
    if len(deltas) == 0:
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    means = deltas[rng.integers(0, len(deltas), size=(BOOTSTRAP_SAMPLES, len(deltas)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def paired_metric(a: list[float | None], b: list[float | None], seed: int = 0) -> dict[str, Any]:
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    if not pairs:
        return {"n": 0}
    left, right = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    deltas = right - left
    low, high = bootstrap_interval(deltas, seed)
    return {
        "n": len(pairs),
        "a": round(float(left.mean()), 4),
        "b": round(float(right.mean()), 4),
        "delta": round(float(deltas.mean()), 4),
        "ci_low": round(low, 4),
        "ci_high": round(high, 4),
        "b_better": int((deltas > 0).sum()),
        "b_worse": int((deltas < 0).sum()),
        "p_value": round(sign_test(deltas), 6),
    }


@dataclass
class QueryChange:
    id: str
    query: str
    kind: str
    a_top: str | None
    b_top: str | None
    a_found: bool
    b_found: bool


@dataclass
class AbReport:
    overrides: dict[str, list[str]]
    queries_label: str
    metrics: dict[str, dict[str, Any]]
    changes: list[QueryChange]
    configs: dict[str, DictConfig] = field(repr=False, default_factory=dict)
    run_id: str | None = None
    report_path: str | None = None
    runs: RunLogger | None = None

    @property
    def changed(self) -> bool:
        return bool(self.changes) or any(m.get("b_better") or m.get("b_worse") for m in self.metrics.values())


def side_config(base: list[str], side: list[str], say: Callable[[str], None]) -> DictConfig:
    """One side's config; with index-time keys of its own, indexed into its own folder first."""
    cfg = load_config([*base, *side])
    if not any(affects_index(o) for o in side):
        return cfg
    redirect = index_redirect([*base, *side], cfg.paths.state_dir)
    kb = indexed_kb(load_config(base))
    cfg = load_config([*base, *side, *redirect])
    say(f"{' '.join(side)}: re-indexing {kb} into {Path(cfg.l0.index_path).parent}")
    return index_first(cfg, kb, replace=True)


def run_ab(
    base: list[str],
    a: list[str],
    b: list[str],
    queries: list[EvalQuery],
    queries_label: str = "",
    report_path: str | None = None,
    experiment: str = AB_EXPERIMENT,
    say: Callable[[str], None] = logger.info,
    seed: int = 0,
) -> AbReport:
    """Evaluate both configs on `queries`, pair them query by query, write the report, log the run."""
    configs = {"a": side_config(base, a, say), "b": side_config(base, b, say)}
    answers = {
        side: evaluate(cfg, queries, [PipelineSystem(cfg)], label=queries_label).answers["pipeline"]
        for side, cfg in configs.items()
    }
    values = {side: [per_query_values(q, r) for q, r in zip(queries, answers[side], strict=True)] for side in SIDES}
    metrics = {
        name: paired_metric([v[name] for v in values["a"]], [v[name] for v in values["b"]], seed) for name in METRICS
    }
    metrics = {name: m for name, m in metrics.items() if m["n"]}
    changes = [
        QueryChange(q.id, q.query, q.kind, _top(ra), _top(rb), ra.answered, rb.answered)
        for q, ra, rb in zip(queries, answers["a"], answers["b"], strict=True)
        if _top(ra) != _top(rb) or ra.answered != rb.answered
    ]
    report = AbReport({"a": a, "b": b, "base": base}, queries_label, metrics, changes, configs)
    path = Path(report_path) if report_path else Path(configs["a"].paths.state_dir) / AB_REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html_report(report), encoding="utf-8")
    report.report_path = str(path)
    report.runs = RunLogger.from_config(configs["a"], experiment)
    report.run_id = _log_run(report, path)
    return report


def _top(answer: Ranked) -> str | None:
    return answer.sources[0] if answer.sources else None


def _log_run(report: AbReport, html_path: Path) -> str | None:
    runs = report.runs
    tags = {
        "kind": "ab-comparison",
        "queries": report.queries_label,
        "ab.a": " ".join(report.overrides["a"]),
        "ab.b": " ".join(report.overrides["b"]),
    }
    run_id = runs.start("ab", tags=tags)
    if run_id is None:
        return None
    try:
        params = {f"{side}.{k}": v for side in SIDES for k, v in flatten_params(report.configs[side]).items()}
        runs.log_params(run_id, params)
        flat: dict[str, float] = {}
        for name, m in report.metrics.items():
            for key in ("a", "b", "delta", "ci_low", "ci_high", "p_value"):
                flat[f"{key}.{metric_name(name)}"] = float(m[key])
        flat["top_changed"] = float(len(report.changes))
        runs.log_metrics(run_id, flat)
        with tempfile.TemporaryDirectory(prefix="knowledge-ab-") as tmp:
            changes = Path(tmp) / "ab-changes.json"
            changes.write_text(json.dumps([c.__dict__ for c in report.changes], indent=1), encoding="utf-8")
            from mlflow import MlflowClient

            client = MlflowClient(runs.tracking_uri)
            client.log_artifact(run_id, str(changes))
            client.log_artifact(run_id, str(html_path))
    except Exception:
        runs.finish(run_id, "FAILED")
        raise
    runs.finish(run_id)
    return run_id


_STYLE = """
body { font-family: sans-serif; margin: 1.5em; } table { border-collapse: collapse; margin-bottom: 1.5em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.5em; font-size: 0.9em; } th { background: #eee; }
.better { background: #e6f4e6; } .worse { background: #fbeaea; } .num { text-align: right; }
"""


def html_report(report: AbReport) -> str:
    """The comparison as one self-contained HTML page: metrics with their test, then the changed queries."""
    e = html.escape
    rows = []
    for name, m in report.metrics.items():
        css = "better" if m["delta"] > 0 else "worse" if m["delta"] < 0 else ""  # every metric: higher is better
        rows.append(
            f"<tr class='{css}'><td>{e(name)}</td><td class='num'>{m['n']}</td><td class='num'>{m['a']:.3f}</td>"
            f"<td class='num'>{m['b']:.3f}</td><td class='num'>{m['delta']:+.3f}</td>"
            f"<td class='num'>[{m['ci_low']:+.3f}, {m['ci_high']:+.3f}]</td>"
            f"<td class='num'>{m['b_better']} / {m['b_worse']}</td><td class='num'>{m['p_value']:.4g}</td></tr>"
        )
    changes = "".join(
        f"<tr><td>{e(c.id)}</td><td>{e(c.query)}</td><td>{e(c.kind)}</td><td>{e(str(c.a_top))}</td>"
        f"<td>{e(str(c.b_top))}</td><td>{c.a_found} &rarr; {c.b_found}</td></tr>"
        for c in report.changes
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>A/B comparison</title>"
        f"<style>{_STYLE}</style></head><body><h1>A/B over {e(report.queries_label)}</h1>"
        f"<p>A: <code>{e(' '.join(report.overrides['a']) or '(defaults)')}</code><br>"
        f"B: <code>{e(' '.join(report.overrides['b']) or '(defaults)')}</code><br>"
        f"both: <code>{e(' '.join(report.overrides['base']) or '-')}</code></p>"
        "<p>Delta is B - A over the queries a metric applies to; the interval is a paired bootstrap 95% "
        f"interval ({BOOTSTRAP_SAMPLES} resamples); p is an exact two-sided sign test over the queries "
        "whose value differs (1 when none does).</p>"
        "<table><tr><th>metric</th><th>queries</th><th>A</th><th>B</th><th>delta</th><th>95% interval</th>"
        f"<th>B better / worse</th><th>p</th></tr>{''.join(rows)}</table>"
        f"<h2>{len(report.changes)} queries whose top source or answer changed</h2>"
        "<table><tr><th>id</th><th>query</th><th>kind</th><th>A top</th><th>B top</th><th>found A &rarr; B</th></tr>"
        f"{changes}</table></body></html>"
    )


def format_ab(report: AbReport, limit: int = 20) -> str:
    lines = [
        f"A/B over {report.queries_label}: A = {' '.join(report.overrides['a']) or '(defaults)'}; "
        f"B = {' '.join(report.overrides['b']) or '(defaults)'}",
        f"{'metric':<18}{'n':>5}{'A':>8}{'B':>8}{'delta':>8}{'95% interval':>20}{'B+/B-':>9}{'p (sign)':>10}",
    ]
    for name, m in report.metrics.items():
        interval = f"[{m['ci_low']:+.3f}, {m['ci_high']:+.3f}]"
        lines.append(
            f"{name:<18}{m['n']:>5}{m['a']:>8.3f}{m['b']:>8.3f}{m['delta']:>+8.3f}{interval:>20}"
            f"{str(m['b_better']) + '/' + str(m['b_worse']):>9}{m['p_value']:>10.4g}"
        )
    lines.append(f"{len(report.changes)} queries changed their top source or answer")
    for change in report.changes[:limit]:
        lines.append(
            f"  {change.id:<10} {change.a_top} -> {change.b_top}"
            + (f" (found {change.a_found} -> {change.b_found})" if change.a_found != change.b_found else "")
        )
    if len(report.changes) > limit:
        lines.append(f"  ... {len(report.changes) - limit} more in the report")
    lines.append(f"report: {report.report_path}")
    if report.runs is not None:
        lines.extend(report.runs.announce(report.run_id))
    return "\n".join(lines)
