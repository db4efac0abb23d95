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

from pipelines.config.manifest import indexed_kb
from pipelines.config.settings import ConfigError, load_config
from pipelines.evaluation.metrics import EvalQuery, Ranked
from pipelines.evaluation.run import PipelineSystem, index_first
from pipelines.tuning.guard_fit import fit_guard, without_sets
from pipelines.tuning.guards import Constraint, QuerySet, evaluate_sets, untested_guards
from pipelines.tuning.recommend import (
    METRICS,
    Candidate,
    Policy,
    ab_verdict,
    format_p,
    metric_values,
    per_query_values,
    sign_test,
)
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
    a_right: bool = False  # the top source is a relevant one (answerable), or nothing was found (off-topic)
    b_right: bool = False


@dataclass
class AbReport:
    overrides: dict[str, list[str]]
    queries_label: str
    metrics: dict[str, dict[str, Any]]
    changes: list[QueryChange]
    configs: dict[str, DictConfig] = field(repr=False, default_factory=dict)
    verdict: str = ""  # the one verdict line (pipelines/tuning/recommend.py::ab_verdict)
    run_id: str | None = None
    report_path: str | None = None
    runs: RunLogger | None = None
    guard: Any = None  # pipelines/tuning/guard_fit.py's GuardFit, fitted on A
    warnings: list[str] = field(default_factory=list)  # guards too small to decide

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
    guards: list[QuerySet] = (),
    constraints: list[Constraint] = (),
) -> AbReport:
    """
    Evaluate both configs on `queries` and the guard sets, pair them query by query, give the verdict
    (B better / worse / no detectable difference, by the recommendation rule), write the report, log the run.
    """
    configs = {"a": side_config(base, a, say), "b": side_config(base, b, say)}
    main = QuerySet(Path(queries_label).stem or "queries", queries_label, queries, "tuning")
    sets = [main, *guards]
    evaluated = {side: evaluate_sets(cfg, sets, [PipelineSystem(cfg)]) for side, cfg in configs.items()}
    answers = {side: evaluation.answers["pipeline"] for side, (evaluation, _) in evaluated.items()}
    metrics = _paired_metrics(sets, answers, seed)
    changes = [
        QueryChange(q.id, q.query, q.kind, _top(ra), _top(rb), ra.answered, rb.answered, _right(q, ra), _right(q, rb))
        for q, ra, rb in zip(queries, answers["a"], answers["b"], strict=False)
        if _top(ra) != _top(rb) or ra.answered != rb.answered
    ]
    report = AbReport({"a": a, "b": b, "base": base}, queries_label, metrics, changes, configs)
    # A is the current settings: the guard is fitted on what A rejects.
    report.guard = fit_guard(configs["a"], sets, list(constraints), evaluated["a"][1])
    policy = Policy.from_config(configs["a"])
    candidates = {
        side: Candidate(
            side.upper(),
            without_sets(per_set, report.guard.left_out),
            {main.name: metric_values(queries, answers[side][: len(queries)], policy.metric)},
        )
        for side, (_, per_set) in evaluated.items()
    }
    constraints = report.guard.constraints
    report.warnings = untested_guards(
        constraints, [c.sets for c in candidates.values()], int(configs["a"].guard.min_off_topic)
    )
    report.verdict = ab_verdict(candidates["a"], candidates["b"], constraints, policy, [main.name])
    path = Path(report_path) if report_path else Path(configs["a"].paths.state_dir) / AB_REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html_report(report), encoding="utf-8")
    report.report_path = str(path)
    report.runs = RunLogger.from_config(configs["a"], experiment)
    report.run_id = _log_run(report, path)
    return report


def _paired_metrics(sets: list[QuerySet], answers: dict[str, list[Ranked]], seed: int) -> dict[str, dict[str, Any]]:
    """Every metric of the compared queries, then each guard set's (`no_evidence_rate@offtopic-alerts`), paired."""
    metrics, start = {}, 0
    for number, query_set in enumerate(sets):
        end = start + len(query_set.queries)
        values = {
            side: [per_query_values(q, r) for q, r in zip(query_set.queries, answers[side][start:end], strict=True)]
            for side in SIDES
        }
        start = end
        for name in METRICS:
            paired = paired_metric([v[name] for v in values["a"]], [v[name] for v in values["b"]], seed)
            if paired["n"]:
                metrics[name if number == 0 else f"{name}@{query_set.name}"] = paired
    return metrics


def _top(answer: Ranked) -> str | None:
    return answer.sources[0] if answer.sources else None


def _right(query: EvalQuery, answer: Ranked) -> bool:
    """Hit@1 for an answerable query; no evidence for an off-topic one."""
    if not query.answerable:
        return not answer.answered
    return answer.answered and _top(answer) in query.relevant


def _mark(right: bool) -> str:
    return "right" if right else "wrong"


def _log_run(report: AbReport, html_path: Path) -> str | None:
    runs = report.runs
    tags = {
        "kind": "ab-comparison",
        "queries": report.queries_label,
        "ab.a": " ".join(report.overrides["a"]),
        "ab.b": " ".join(report.overrides["b"]),
        "ab.verdict": report.verdict,
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
            f"<td class='num'>{m['b_better']} / {m['b_worse']}</td><td class='num'>{format_p(m['p_value'])}</td></tr>"
        )
    changes = "".join(
        f"<tr><td>{e(c.id)}</td><td>{e(c.query)}</td><td>{e(c.kind)}</td><td>{e(str(c.a_top))}</td>"
        f"<td>{e(str(c.b_top))}</td><td>{c.a_found} &rarr; {c.b_found}</td>"
        f"<td>{_mark(c.a_right)} &rarr; {_mark(c.b_right)}</td></tr>"
        for c in report.changes
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>A/B comparison</title>"
        f"<style>{_STYLE}</style></head><body><h1>A/B over {e(report.queries_label)}</h1>"
        f"<p>A: <code>{e(' '.join(report.overrides['a']) or '(defaults)')}</code><br>"
        f"B: <code>{e(' '.join(report.overrides['b']) or '(defaults)')}</code><br>"
        f"both: <code>{e(' '.join(report.overrides['base']) or '-')}</code></p>"
        f"<p><strong>{e(report.verdict)}</strong></p>"
        + "".join(f"<p>{e(line)}</p>" for line in _guard_lines(report))
        + "<p>Delta is B - A over the queries a metric applies to; the interval is a paired bootstrap 95% "
        f"interval ({BOOTSTRAP_SAMPLES} resamples); p is an exact two-sided sign test over the queries "
        "whose value differs (1 when none does).</p>"
        "<table><tr><th>metric</th><th>queries</th><th>A</th><th>B</th><th>delta</th><th>95% interval</th>"
        f"<th>B better / worse</th><th>p</th></tr>{''.join(rows)}</table>"
        f"<h2>{len(report.changes)} queries whose top source or answer changed</h2>"
        "<table><tr><th>id</th><th>query</th><th>kind</th><th>A top</th><th>B top</th><th>found A &rarr; B</th>"
        "<th>A &rarr; B</th></tr>"
        f"{changes}</table></body></html>"
    )


def _guard_lines(report: AbReport) -> list[str]:
    """The guard in effect (fitted on A) and the warnings of a guard too small to decide."""
    lines = [f"warning: {warning}" for warning in report.warnings]
    return lines + (report.guard.lines() if report.guard is not None else [])


def format_ab(report: AbReport, limit: int = 20) -> str:
    lines = [
        f"A/B over {report.queries_label}: A = {' '.join(report.overrides['a']) or '(defaults)'}; "
        f"B = {' '.join(report.overrides['b']) or '(defaults)'}",
        f"{'metric':<34}{'n':>5}{'A':>8}{'B':>8}{'delta':>8}{'95% interval':>20}{'B+/B-':>9}{'p (sign)':>10}",
    ]
    for name, m in report.metrics.items():
        interval = f"[{m['ci_low']:+.3f}, {m['ci_high']:+.3f}]"
        lines.append(
            f"{name:<34}{m['n']:>5}{m['a']:>8.3f}{m['b']:>8.3f}{m['delta']:>+8.3f}{interval:>20}"
            f"{str(m['b_better']) + '/' + str(m['b_worse']):>9}{format_p(m['p_value']):>10}"
        )
    lines += _guard_lines(report)
    lines.append(report.verdict)
    lines.append(f"{len(report.changes)} queries changed their top source or answer (A -> B)")
    for change in report.changes[:limit]:
        lines.append(
            f"  {change.id:<10} {_mark(change.a_right)} -> {_mark(change.b_right)}: {change.a_top} -> {change.b_top}"
            + (f" (found {change.a_found} -> {change.b_found})" if change.a_found != change.b_found else "")
        )
    if len(report.changes) > limit:
        lines.append(f"  ... {len(report.changes) - limit} more in the report")
    lines.append(f"report: {report.report_path}")
    if report.runs is not None:
        lines.extend(report.runs.announce(report.run_id))
    return "\n".join(lines)
