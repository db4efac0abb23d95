"""
The guard in effect on this knowledge base: each guard set measured at the current settings, the
sets the knowledge base answers left out, and the constraints a candidate must keep on the others.

A guard set is off-topic for one knowledge base only: the shipped alerts about MySQL or Kafka are
on-topic for a knowledge base that covers them. So the default constraint is relative: on each guard
set a candidate may not reject less than the current settings do, minus `guard.tolerance`. A guard
set the current settings reject less than `guard.min_fit` of does not fit this knowledge base: it is
left out, with its counts and how to build one that fits (`knowledge guard build`), rather than
making every setting infeasible. `guard.constraints` stays the absolute floor, when one is wanted.

    fit = fit_guard(cfg, sets, constraints, current_per_set)
    print("\n".join(fit.lines()))
    sweep over fit.sets under fit.constraints
"""

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from pipelines.config.settings import ConfigError
from pipelines.tuning.guards import OFF_TOPIC_METRICS, Constraint, QuerySet, evaluate_sets, query_counts

REJECTION = OFF_TOPIC_METRICS[0]
BUILD_HINT = "build one that fits: knowledge guard build --kb DIR, then guard=built (docs/tuning.md#guard-sets)"


@dataclass(frozen=True)
class GuardPolicy:
    """How a guard set is fitted: the relative tolerance (None: no relative constraint) and the fit floor."""

    tolerance: float | None
    min_fit: float

    @classmethod
    def from_config(cls, cfg) -> "GuardPolicy":
        tolerance = cfg.guard.tolerance
        return cls(None if tolerance is None else float(tolerance), float(cfg.guard.min_fit))


@dataclass
class GuardFit:
    """The sets and constraints in effect, each guard set's rejection at the current settings, and what was left out."""

    sets: list[QuerySet]
    constraints: list[Constraint]
    policy: GuardPolicy
    current: dict[str, dict[str, Any]] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)

    @property
    def guard_sets(self) -> list[QuerySet]:
        return [s for s in self.sets if s.role == "guard"]

    def lines(self) -> list[str]:
        """One line per guard set: in effect (with its bound) or left out and why; `none` when there is none."""
        lines = [f"guard {name} left out: {why}" for name, why in self.left_out.items()]
        for query_set in self.guard_sets:
            lines.append(f"guard in effect: {query_set.name} ({query_set.path}): {self._holds(query_set.name)}")
        if not self.guard_sets:
            floors = ", ".join(c.label for c in self.constraints)
            lines.append(f"guard in effect: no guard set{f' (constraints {floors})' if floors else ''}; {BUILD_HINT}")
        return lines

    def _holds(self, name: str) -> str:
        metrics = self.current.get(name, {})
        rejected = _rejected_count(metrics)
        measured = f"the current settings reject {rejected} of {metrics.get('off_topic', 0)} ({_rate(metrics)})"
        bounds = [c.label for c in self.constraints if c.set_name == name or c.set_name is None]
        if not bounds:
            return measured
        return f"{measured}; a setting must keep {', '.join(bounds)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "in_effect": {s.name: s.path for s in self.guard_sets},
            "left_out": dict(self.left_out),
            "constraints": [c.label for c in self.constraints],
            "tolerance": self.policy.tolerance,
            "min_fit": self.policy.min_fit,
        }


def fit_guard(cfg, sets: list[QuerySet], constraints: list[Constraint], current: dict[str, dict[str, Any]]) -> GuardFit:
    """
    Fit the guard sets among `sets` to the knowledge base from `current` (each set's metrics at the current
    settings): keep the fitting ones with a relative constraint each, leave out the others; other sets pass.
    """
    policy = GuardPolicy.from_config(cfg)
    kept, left_out, relative = [], {}, []
    for query_set in sets:
        metrics = current.get(query_set.name, {})
        if query_set.role != "guard" or not metrics.get("off_topic"):
            kept.append(query_set)
            continue
        rate = float(metrics[REJECTION])
        if rate < policy.min_fit:
            left_out[query_set.name] = _not_fitting(query_set, metrics, policy)
            continue
        kept.append(query_set)
        if policy.tolerance is not None:
            relative.append(relative_bound(REJECTION, query_set.name, rate, policy.tolerance))
    floors = [c for c in constraints if c.set_name not in left_out]
    return GuardFit(kept, [*floors, *relative], policy, current, left_out)


def measure_guard(cfg, sets: list[QuerySet]) -> dict[str, dict[str, Any]]:
    """The guard sets' metrics at `cfg` (the current settings): what `fit_guard` needs when nothing measured them."""
    from pipelines.evaluation.run import PipelineSystem

    guards = [s for s in sets if s.role == "guard"]
    if not guards:
        return {}
    _, per_set = evaluate_sets(cfg, guards, [PipelineSystem(cfg)])
    return per_set


def check_relative(metrics: list[str], sets: list[QuerySet], origin: str) -> None:
    """Refuse a relative bound that no query of the sets can measure: it would hold nothing."""
    for metric in metrics:
        probe = Constraint(metric, ">=", 0.0)
        if not any(probe.counts(query_counts(s.queries)) for s in sets):
            kind = "off-topic" if metric in OFF_TOPIC_METRICS else "answerable"
            raise ConfigError(
                f"{origin} bounds {metric} on each query set relative to the current settings, but "
                f"the query sets {', '.join(s.name for s in sets)} have no {kind} queries: add a query set that has some (--guard FILE, "
                "e.g. eval/offtopic-alerts.jsonl for the runbook corpus) or drop the space's constraints with --constraint none"
            )


def measure_groups(cfg, groups: list[list[QuerySet]], measured=None) -> list[dict[str, dict[str, Any]]]:
    """
    Each group of sets' metrics at `cfg` (the current settings), one pass per group (a split's parts
    share names); kept in `measured` (pipelines/tuning/measured.py) for whoever scores them again.
    """
    from pipelines.evaluation.run import PipelineSystem
    from pipelines.tuning.measured import MeasuredSets

    measured = measured or MeasuredSets()
    systems = functools.cache(lambda: [PipelineSystem(cfg)])  # built once, and only if something is run
    return [measured.evaluate(cfg, sets, systems)[1] if sets else {} for sets in groups]


def without_sets(per_set: dict[str, Any], names) -> dict[str, Any]:
    """A per-set mapping without the sets left out."""
    return {name: value for name, value in per_set.items() if name not in names}


def relative_bound(metric: str, name: str, current: float, tolerance: float) -> Constraint:
    """`METRIC@NAME>=CURRENT-tolerance`: a setting may lose no more than `tolerance` of what the current settings get."""
    # Floored to 3 decimals so the label reads as the rate is printed and the current settings always keep it.
    bound = max(0.0, math.floor((current - tolerance) * 1000 + 1e-9) / 1000)
    return Constraint(metric, ">=", bound, name, f"guard.tolerance={tolerance:g} below the current settings")


def fit_query_sets(
    cfg, metrics: list[str], measured: list[dict[str, dict[str, Any]]], floors: list[Constraint]
) -> tuple[list[Constraint], list[str]]:
    """
    The bounds of a search's own query sets (tuning and held-out, named in `measured`: each group's
    metrics at the current settings): per set and metric of `metrics` it counts, the relative bound of
    the guard's rule, from the lowest value of the set's parts (a split's tuning and held-out parts share
    a name, and the current settings keep the bound on both); and one line per set naming its bounds.
    """
    tolerance = GuardPolicy.from_config(cfg).tolerance
    constraints, lines = [], []
    if not metrics:  # the space bounds nothing relative: its floors are named with the guard
        return constraints, lines
    for name in dict.fromkeys(n for per_set in measured for n in per_set):
        parts = [per_set[name] for per_set in measured if name in per_set]
        current = {m: _lowest(m, name, parts) for m in metrics}
        current = {m: value for m, value in current.items() if value is not None}
        mine = [relative_bound(m, name, value, tolerance) for m, value in current.items() if tolerance is not None]
        constraints += mine
        counted = [c for c in floors if c.applies_to(name) and any(c.counts(p) for p in parts)]
        lines.append(_bounds_line(name, current, mine, counted, tolerance))
    return constraints, lines


def _lowest(metric: str, name: str, parts: list[dict[str, Any]]) -> float | None:
    probe = Constraint(metric, ">=", 0.0, name)
    values = [float(p[metric]) for p in parts if probe.counts(p) and p.get(metric) is not None]
    return min(values) if values else None


def _bounds_line(name: str, current: dict[str, float], relative: list[Constraint], floors, tolerance) -> str:
    got = ", ".join(f"{metric} {value:.3f}" for metric, value in current.items()) or "none of the bounded metrics"
    line = f"bounds on {name}: the current settings get {got}"
    if relative:
        labels = ", ".join(c.label for c in relative)
        line += f"; relative: a setting must keep {labels} (guard.tolerance={tolerance:g})"
    elif current:
        line += "; no relative bound (guard.tolerance=null)"
    if floors:
        line += f"; absolute: {', '.join(f'{c.label} ({c.origin})' for c in floors)}"
    return line


def _not_fitting(query_set: QuerySet, metrics: dict[str, Any], policy: GuardPolicy) -> str:
    rejected, total = _rejected_count(metrics), int(metrics.get("off_topic") or 0)
    return (
        f"the knowledge base answers its texts at the current settings (rejects {rejected} of {total}, "
        f"{_rate(metrics)} < guard.min_fit={policy.min_fit:g}): {query_set.path} does not fit this knowledge base; "
        f"{BUILD_HINT}"
    )


def _rejected_count(metrics: dict[str, Any]) -> int:
    return round(float(metrics.get(REJECTION) or 0.0) * int(metrics.get("off_topic") or 0))


def _rate(metrics: dict[str, Any]) -> str:
    value = metrics.get(REJECTION)
    return "-" if value is None else f"{float(value):.3f}"
