"""
The one rule that turns an evaluation into a setting to deploy, shared by the sweep (`eval -m`), the
search (`eval --search`), the A/B (`compare --a/--b`) and the threshold notebook.

A candidate is recommended over the current settings only when it keeps every constraint on every
evaluated set (tuning, guard and held-out) and beats the current settings by an exact two-sided sign
test over the paired per-query values of the primary metric at the configured level (`guard.level`).
Otherwise the verdict is "keep the current settings" with its reason, and no setting line.

    verdict = recommend(current, best, constraints, Policy("hit@1", 0.05))
    print("\n".join(verdict.lines()))
"""

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.evaluation.metrics import EvalQuery, Ranked, first_hit, ndcg
from pipelines.tuning.guards import Constraint, set_violations

# The metrics that have a value per query, so two settings can be paired query by query.
METRICS = ("hit@1", "hit@5", "mrr@10", "ndcg@10", "answer_rate", "no_evidence_rate")
KEEP = "keep the current settings"


def per_query_values(query: EvalQuery, answer: Ranked) -> dict[str, float | None]:
    """Each metric of one query; None where a metric does not apply (hit@1 of an off-topic query)."""
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


def metric_values(queries: list[EvalQuery], answers: list[Ranked], metric: str) -> list[float | None]:
    """One metric's per-query values, in query order (the pairing key of two settings)."""
    return [per_query_values(q, a)[metric] for q, a in zip(queries, answers, strict=True)]


def sign_test(deltas: np.ndarray) -> float:
    """
    Exact two-sided sign test of paired deltas; ties are left out, and no untied pair gives p = 1.
    The binomial tail at 0.5 in integers (what scipy's `binomtest(...).pvalue` gives): scipy's array
    probes fail in a process that keeps torch out (a lookup or serve process with an ONNX backend).
    """
    wins, losses = int((deltas > 0).sum()), int((deltas < 0).sum())
    untied = wins + losses
    if untied == 0:
        return 1.0
    tail = sum(math.comb(untied, k) for k in range(min(wins, losses) + 1))
    return min(1.0, 2 * tail / 2**untied)


def format_p(p: float) -> str:
    """A p-value as printed everywhere: `<0.001` below 0.001 (a rounded 0 would read as certainty)."""
    return "<0.001" if p < 0.001 else f"{p:.3g}"


@dataclass(frozen=True)
class Policy:
    """What decides: the metric of the paired test and its significance level (`guard.primary_metric`, `guard.level`)."""

    metric: str
    level: float

    @classmethod
    def from_config(cls, cfg, metric: str | None = None) -> "Policy":
        """The config's policy; `metric` (a search's or a sweep's ranking metric) when it has per-query values."""
        chosen = metric if metric in METRICS else cfg.guard.primary_metric
        return cls(chosen, float(cfg.guard.level))


@dataclass
class Candidate:
    """A setting as evaluated: its override line, each set's metrics and each set's per-query values of the metric."""

    label: str
    sets: dict[str, dict[str, Any]]
    values: dict[str, list[float | None]] = field(default_factory=dict)
    held_out: dict[str, dict[str, Any]] = field(default_factory=dict)  # held-out sets (a split keeps its file's name)

    def breaks(self, constraints: list[Constraint]) -> list[str]:
        """ "LABEL on SET" for every constraint a set breaks, held-out sets included."""
        broken = []
        for where, sets in (("", self.sets), (" (held out)", self.held_out)):
            for name, metrics in sets.items():
                broken += [f"{label} on {name}{where}" for label in set_violations(constraints, name, metrics)]
        return broken


@dataclass
class PairedTest:
    n: int
    current: float
    candidate: float
    better: int
    worse: int
    p_value: float

    @property
    def delta(self) -> float:
        return self.candidate - self.current

    def describe(self, metric: str) -> str:
        return (
            f"{metric} {self.candidate:.3f} vs {self.current:.3f}, {self.better} queries better / {self.worse} worse, "
            f"n={self.n}, p={format_p(self.p_value)}"
        )


def paired_test(current: Candidate, candidate: Candidate, sets: list[str]) -> PairedTest:
    """The sign test of the candidate against the current settings over the queries of `sets` both were scored on."""
    pairs = [
        (x, y)
        for name in sets
        for x, y in zip(current.values.get(name, []), candidate.values.get(name, []), strict=False)
        if x is not None and y is not None
    ]
    if not pairs:
        return PairedTest(0, 0.0, 0.0, 0, 0, 1.0)
    left, right = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    deltas = right - left
    return PairedTest(
        len(pairs),
        float(left.mean()),
        float(right.mean()),
        int((deltas > 0).sum()),
        int((deltas < 0).sum()),
        sign_test(deltas),
    )


@dataclass
class Verdict:
    """The decision: the recommended candidate (or None: keep the current settings) and why."""

    recommended: Candidate | None
    reason: str
    test: PairedTest | None = None
    unguarded: list[str] = field(default_factory=list)  # the "not tested" warnings of the guard

    def lines(self) -> list[str]:
        lines = [f"warning: {warning}" for warning in self.unguarded]
        if self.recommended is None:
            return [*lines, f"{KEEP}: {self.reason}"]
        lines.append(f"recommended over the current settings: {self.reason}")
        mark = " (unguarded)" if self.unguarded else ""
        return [*lines, f"best setting{mark}: {self.recommended.label}"]


def recommend(
    current: Candidate,
    best: Candidate | None,
    constraints: list[Constraint],
    policy: Policy,
    paired_sets: list[str],
    unguarded: list[str] = (),
    under: str = "",
) -> Verdict:
    """
    Recommend `best` over `current` only when it keeps every constraint on every set it was scored on and
    the sign test over `paired_sets` finds it better at `policy.level`; else keep the current settings.
    `under` ends a reason that the constraints decided (none met them, or only the current settings).
    """
    verdict = _decide(current, best, constraints, policy, paired_sets, list(unguarded), under)
    current_breaks = current.breaks(constraints)
    if verdict.recommended is None and current_breaks:  # keeping them keeps a broken guard: say so
        verdict.reason += f"; note: the current settings break {', '.join(current_breaks)}"
    return verdict


def _decide(
    current: Candidate,
    best: Candidate | None,
    constraints: list[Constraint],
    policy: Policy,
    paired_sets: list[str],
    unguarded: list[str],
    under: str = "",
) -> Verdict:
    if best is None:
        return Verdict(None, f"no setting tried met the constraints{under}", unguarded=unguarded)
    if best.label == current.label:
        return Verdict(None, f"the current settings are the best setting tried{under}", unguarded=unguarded)
    broken = best.breaks(constraints)
    if broken:
        return Verdict(None, f"the best setting tried ({best.label}) breaks {', '.join(broken)}", unguarded=unguarded)
    test = paired_test(current, best, paired_sets)
    described = test.describe(policy.metric)
    if test.n == 0:
        return Verdict(None, f"no query to pair {best.label} with the current settings on", test, unguarded)
    if test.delta <= 0 or test.p_value >= policy.level:
        reason = f"{best.label} is not better at level {policy.level:g} ({described})"
        return Verdict(None, reason, test, unguarded)
    return Verdict(best, f"{described} (level {policy.level:g})", test, unguarded)


def ab_verdict(
    a: Candidate, b: Candidate, constraints: list[Constraint], policy: Policy, paired_sets: list[str]
) -> str:
    """The A/B's one verdict line, by the same rule: B is better only when `recommend` would pick it over A."""
    test = paired_test(a, b, paired_sets)
    stats = f"(n={test.n}, p={format_p(test.p_value)})"
    b_broken, a_broken = b.breaks(constraints), a.breaks(constraints)
    if b_broken and not a_broken:
        # A broken guard decides, not the primary metric's test: quote what B broke, not that test's p.
        return f"B is worse: B breaks {', '.join(b_broken)} ({_guard_values(a, b, constraints)})"
    if recommend(a, b, constraints, policy, paired_sets).recommended is not None:
        return f"B is better {stats} on {policy.metric}"
    if test.delta < 0 and test.p_value < policy.level:
        return f"B is worse {stats} on {policy.metric}"
    note = f"; A breaks {', '.join(a_broken)}" if a_broken else ""
    return f"no detectable difference {stats} on {policy.metric} at level {policy.level:g}{note}"


def _guard_values(a: Candidate, b: Candidate, constraints: list[Constraint]) -> str:
    """Each broken constraint's metric on its set, B against A, as the guard measured them."""
    shown = []
    for name, metrics in b.sets.items():
        for constraint in constraints:
            if constraint.label in set_violations(constraints, name, metrics):
                ours, theirs = metrics.get(constraint.metric), a.sets.get(name, {}).get(constraint.metric)
                shown.append(f"{constraint.metric} on {name}: B {_value(ours)} vs A {_value(theirs)}")
    return "; ".join(shown)


def _value(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3f}"


def set_values(sets: list[Any], answers: list[Ranked], metric: str) -> dict[str, list[float | None]]:
    """Per query set, the metric's per-query values, from the pooled answers of `evaluate_sets` (sets in order)."""
    values, start = {}, 0
    for query_set in sets:
        mine = answers[start : start + len(query_set.queries)]
        start += len(query_set.queries)
        values[query_set.name] = metric_values(query_set.queries, mine, metric)
    return values
