"""
Constraints of a guarded search or sweep, and the query sets they are measured on.

A constraint is `METRIC[@SET]>=BOUND` or `METRIC[@SET]<=BOUND`, e.g. `no_evidence_rate>=0.95`
(off-topic rejection) or `answer_rate@prometheus-dev>=0.95`. Without `@SET` it holds on every
evaluated query set that has queries the metric counts (off-topic queries for
`no_evidence_rate`, answerable ones for hit@k, MRR, answer rate, ...), each set apart; with
`@SET` on that set only (a set is named by its file's stem). A constraint that has no query to
be measured on is refused before any trial runs: it would guard nothing.

Usage example:

```python
guard = Constraint.parse("no_evidence_rate>=0.95", origin="--constraint")
sets = load_sets(["eval/prometheus-dev.jsonl"], role="tuning")
check_measurable([guard], sets)
violation = guard.violation({"prometheus-dev": {"no_evidence_rate": 0.9, "off_topic": 20}})  # 0.05 > 0
```
"""

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.config.settings import ConfigError
from pipelines.evaluation.metrics import EvalQuery, score
from pipelines.evaluation.run import Evaluation, evaluate, load_queries
from pipelines.tuning.ranking import RANKABLE, rankable
from pipelines.tuning.runs import metric_name

# Which queries a metric counts: no_evidence_rate the off-topic ones, rates over answers any, the rest answerable.
OFF_TOPIC_METRICS = ("no_evidence_rate",)
ANY_QUERY_METRICS = ("fallback_rate", "latency_p50_ms", "latency_p95_ms")
# Given with --constraint, drops the constraints a space or a sweep would apply by default.
NO_CONSTRAINTS = "none"
_SYNTAX = re.compile(r"^\s*(?P<lhs>[\w@.-]+?)\s*(?P<op>>=|<=)\s*(?P<bound>\S+)\s*$")


def _is_metric(name: str) -> bool:
    return name in RANKABLE or name in {metric_name(m) for m in RANKABLE}


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str
    bound: float
    set_name: str | None = None
    origin: str = ""

    @classmethod
    def parse(cls, text: str, origin: str = "--constraint") -> "Constraint":
        match = _SYNTAX.match(str(text))
        if not match:
            raise ConfigError(
                f"{origin}: {text!r} is not a constraint; write METRIC[@SET]>=BOUND or <=BOUND, "
                "e.g. 'no_evidence_rate>=0.95' or 'answer_rate@prometheus-dev>=0.95'"
            )
        metric, set_name = match["lhs"], None
        if "@" in metric and not _is_metric(metric):
            metric, set_name = metric.rsplit("@", 1)
        try:
            metric = rankable(metric)
        except ConfigError as exc:
            raise ConfigError(
                f"{origin}: {text!r}: unknown metric {metric!r}; the metrics are {', '.join(RANKABLE)}"
            ) from exc
        try:
            return cls(metric, match["op"], _bound(match["bound"], metric), set_name or None, origin)
        except ValueError as exc:
            raise ConfigError(f"{origin}: {text!r}: {exc}") from exc

    @property
    def label(self) -> str:
        where = f"@{self.set_name}" if self.set_name else ""
        return f"{self.metric}{where}{self.op}{self.bound:g}"

    def counts(self, metrics: dict[str, Any]) -> int:
        """How many queries of a set this constraint's metric counts."""
        if self.metric in OFF_TOPIC_METRICS:
            return int(metrics.get("off_topic") or 0)
        if self.metric in ANY_QUERY_METRICS:
            return int(metrics.get("answerable") or 0) + int(metrics.get("off_topic") or 0)
        return int(metrics.get("answerable") or 0)

    def applies_to(self, set_name: str) -> bool:
        return self.set_name is None or self.set_name == set_name

    def value(self, per_set: dict[str, dict[str, Any]]) -> float | None:
        """The worst value over the sets it applies to (each set must pass), None when none counts."""
        values = [
            float(metrics[self.metric])
            for name, metrics in per_set.items()
            if self.applies_to(name) and self.counts(metrics) and metrics.get(self.metric) is not None
        ]
        if not values:
            return None
        return min(values) if self.op == ">=" else max(values)

    def violation(self, per_set: dict[str, dict[str, Any]]) -> float:
        """Optuna's convention: <= 0 when the constraint holds, the shortfall otherwise."""
        value = self.value(per_set)
        if value is None:
            return float("inf")
        return self.bound - value if self.op == ">=" else value - self.bound


def _bound(text: str, metric: str) -> float:
    """A finite bound the metric can reach: a rate or score lies in [0, 1], a latency is not negative."""
    try:
        bound = float(text)
    except ValueError:
        raise ValueError(f"bound {text!r} is not a number") from None
    if not math.isfinite(bound):
        raise ValueError(f"bound {text!r} is not a finite number")
    if metric.endswith("_ms"):
        if bound < 0:
            raise ValueError(f"bound {text} is negative: {metric} is a latency in ms")
    elif not 0 <= bound <= 1:
        raise ValueError(f"bound {text} is outside [0, 1], the range of {metric}")
    return bound


def parse_constraints(declared: list[str], given: list[str], declared_origin: str) -> list[Constraint]:
    """The declared constraints (a space's or a sweep's default) plus the given ones; `none` drops the declared."""
    if NO_CONSTRAINTS in given:
        declared = []
    constraints = [Constraint.parse(text, declared_origin) for text in declared]
    constraints += [Constraint.parse(text) for text in given if text != NO_CONSTRAINTS]
    return list(dict.fromkeys(constraints))


def feasible(constraints: list[Constraint], per_set: dict[str, dict[str, Any]]) -> bool:
    return all(c.violation(per_set) <= 0 for c in constraints)


def violated(constraints: list[Constraint], per_set: dict[str, dict[str, Any]]) -> list[str]:
    return [c.label for c in constraints if c.violation(per_set) > 0]


def set_violations(constraints: list[Constraint], name: str, metrics: dict[str, Any]) -> list[str]:
    """The constraints one set breaks, among those that apply to it and count some of its queries."""
    mine = [c for c in constraints if c.applies_to(name) and c.counts(metrics)]
    return violated(mine, {name: metrics})


@dataclass
class QuerySet:
    """One query file evaluated in every trial: `tuning` (the objective), `guard` (constraints only), `held-out`."""

    name: str
    path: str
    queries: list[EvalQuery]
    role: str


def load_sets(paths: list[str], role: str, taken: list[QuerySet] = ()) -> list[QuerySet]:
    """One set per file, named by its stem; two files of one name are refused (a constraint could not tell them apart)."""
    sets = []
    names = {s.name for s in taken}
    for path in paths:
        name = Path(path).stem
        if name in names:
            raise ConfigError(f"two query files are named {name!r}: a set is named by its file's stem, rename one")
        names.add(name)
        sets.append(QuerySet(name, str(path), load_queries(path), role))
    return sets


def check_measurable(constraints: list[Constraint], sets: list[QuerySet]) -> None:
    """Refuse a constraint that no query of the sets can measure: it would guard nothing."""
    names = [s.name for s in sets]
    for constraint in constraints:
        if constraint.set_name is not None and constraint.set_name not in names:
            raise ConfigError(
                f"constraint {constraint.label} ({constraint.origin}) names set {constraint.set_name!r}, "
                f"but the evaluated sets are {', '.join(names)}"
            )
        counted = sum(constraint.counts(query_counts(s.queries)) for s in sets if constraint.applies_to(s.name))
        if not counted:
            kind = "off-topic" if constraint.metric in OFF_TOPIC_METRICS else "answerable"
            raise ConfigError(
                f"constraint {constraint.label} ({constraint.origin}) has no {kind} queries to evaluate in "
                f"{', '.join(names)}: add a query set that has some (--guard FILE, e.g. eval/offtopic-alerts.jsonl "
                f"for the runbook corpus) or drop the space's constraints with --constraint none"
            )


def query_counts(queries: list[EvalQuery]) -> dict[str, int]:
    answerable = sum(1 for q in queries if q.answerable)
    return {"answerable": answerable, "off_topic": len(queries) - answerable}


def evaluate_sets(cfg, sets: list[QuerySet], systems: list[Any]) -> tuple[Evaluation, dict[str, dict[str, Any]]]:
    """
    Every set in one pass: the evaluation of all their queries, whose pipeline metrics are those of
    the tuning sets pooled (the objective), and each set's own pipeline metrics apart.
    """
    pooled = [q for s in sets for q in s.queries]
    evaluation = evaluate(cfg, pooled, systems, label=", ".join(s.path for s in sets))
    answers = evaluation.answers["pipeline"]
    per_set: dict[str, dict[str, Any]] = {}
    tuning_queries, tuning_answers = [], []
    start = 0
    for query_set in sets:
        mine = answers[start : start + len(query_set.queries)]
        start += len(query_set.queries)
        per_set[query_set.name] = score(query_set.queries, mine)
        if query_set.role == "tuning":
            tuning_queries += query_set.queries
            tuning_answers += mine
    if tuning_queries:
        evaluation.report["systems"]["pipeline"] = score(tuning_queries, tuning_answers)
    evaluation.report["sets"] = per_set
    return evaluation, per_set


def resolve_guard_path(path: str) -> str:
    """A guard file as given, from the working directory, else from the project (where conf/ lives)."""
    from pipelines.config.settings import CONF_DIR

    given = Path(path)
    if given.exists():
        return str(given)
    in_project = CONF_DIR.resolve().parent / given
    if not given.is_absolute() and in_project.exists():
        return str(in_project)
    where = [str(given.parent)] if given.is_absolute() else sorted({str(Path.cwd()), str(CONF_DIR.resolve().parent)})
    raise ConfigError(
        f"guard.sets: {path} not found in {' nor in '.join(where)}; guard=none drops the guard sets, "
        "knowledge guard build --kb DIR writes the one guard=built reads"
    )


def guard_sets(cfg, given: list[str], taken: list[QuerySet]) -> list[QuerySet]:
    """The configured guard sets (`guard.sets`) and the `--guard` files, each file once."""
    names = {s.name for s in taken}
    # A configured guard also given as a tuning set is scored there already.
    configured = [p for p in map(resolve_guard_path, cfg.guard.sets) if Path(p).stem not in names]
    unique: dict[str, str] = {}
    for path in [*configured, *given]:
        unique.setdefault(str(Path(path).resolve()), path)
    return load_sets(list(unique.values()), "guard", taken)


def guard_constraints(cfg, declared: list[str], given: list[str], declared_origin: str) -> list[Constraint]:
    """The configured guard's constraints, a space's (`declared`) and the given ones; `none` drops all but the given."""
    configured = [Constraint.parse(text, "guard.constraints") for text in cfg.guard.constraints]
    if NO_CONSTRAINTS in given:
        configured = []
    by_label: dict[str, Constraint] = {}
    for constraint in [*configured, *parse_constraints(declared, given, declared_origin)]:
        by_label.setdefault(constraint.label, constraint)  # the same constraint from two places is one
    return list(by_label.values())


def untested_guards(
    constraints: list[Constraint], per_set_of_each: list[dict[str, dict[str, Any]]], min_off_topic: int
) -> list[str]:
    """
    The off-topic constraints that could not fail: too few off-topic queries, or every one of them
    rejected at every setting tried. Such a constraint kept nothing out; the "best" is unguarded.
    """
    warnings = []
    for constraint in [c for c in constraints if c.metric in OFF_TOPIC_METRICS]:
        why = _why_untested(constraint, per_set_of_each, min_off_topic)
        if why is not None:
            warnings.append(
                f"off-topic constraint {constraint.label} not tested: {why}; add a guard set of questions or alerts "
                "about systems the knowledge base does not cover (--guard FILE or guard.sets=[FILE]; "
                "docs/tuning.md#guard-sets)"
            )
    return warnings


def _why_untested(
    constraint: Constraint, per_set_of_each: list[dict[str, dict[str, Any]]], min_off_topic: int
) -> str | None:
    """Why an off-topic constraint could not fail at the settings tried, or None when it could."""
    mine = _counted_sets(constraint, per_set_of_each)
    if not mine or not mine[0]:
        return None
    count = sum(constraint.counts(m) for m in mine[0].values())
    if count < min_off_topic:
        return f"only {count} off-topic queries (fewer than guard.min_off_topic={min_off_topic})"
    if all(float(m.get(constraint.metric) or 0) >= 1.0 for per_set in mine for m in per_set.values()):
        return f"every one of the {count} off-topic queries was rejected at every setting tried"
    return None


def _counted_sets(
    constraint: Constraint, per_set_of_each: list[dict[str, dict[str, Any]]]
) -> list[dict[str, dict[str, Any]]]:
    """Per setting tried, the metrics of the sets the constraint applies to and counts queries of."""
    return [
        {name: m for name, m in per_set.items() if constraint.applies_to(name) and constraint.counts(m)}
        for per_set in per_set_of_each
    ]
