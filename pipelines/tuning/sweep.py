"""
Hydra sweeps of `knowledge eval -m`: every combination of the overrides, each one MLflow child
run under a parent run, ranked by a metric.

The overrides are expanded by Hydra's own parser and BasicSweeper (`a=1,2`, `range(...)`,
`choice(...)`). The model and the collection are shared by every combination that only changes
query-time keys; a combination that changes how chunks are made (`chunking.*`, `embedder.*`,
`kb.*`, `milvus.index_*`) is indexed into its own folder under the state dir. Constraints
(pipelines/tuning/guards.py, the off-topic guard by default) are measured on every combination:
the ranking puts the feasible ones first and the best is a feasible one, or there is none.
"""

import hashlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.errors import first_line
from pipelines.config.manifest import indexed_kb
from pipelines.config.settings import ConfigError, load_config
from pipelines.evaluation.metrics import EvalQuery
from pipelines.evaluation.run import build_systems, index_first
from pipelines.tuning.ranking import LOWER_IS_BETTER, rankable
from pipelines.tuning.runs import RunLogger, metric_name

logger = logging.getLogger(__name__)

# What a sweep's runs keep for the verdict to be given again from MLflow (pipelines/tuning/review.py).
PAIRED_VALUES_ARTIFACT = "paired_values.json"
CURRENT_TAG = "sweep.current"
INDEX_KEY_PREFIXES = ("kb.", "chunking.", "embedder.", "milvus.index_type", "milvus.index_params", "milvus.collection")


def parse_overrides(overrides: list[str]) -> list[Any]:
    """Hydra `Override` objects, a syntax error as a `ConfigError`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise ConfigError(first_line(exc)) from exc


def has_sweep(overrides: list[str]) -> bool:
    return any(override.is_sweep_override() for override in parse_overrides(overrides))


def expand(overrides: list[str]) -> list[list[str]]:
    """Every combination of the overrides, as override lists (Hydra's BasicSweeper order)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.errors import HydraException

    parsed = parse_overrides(overrides)
    try:
        return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]
    except HydraException as exc:
        raise ConfigError(f"{exc}: sweep with a,b,c lists, range(...) or choice(...)") from exc


def swept_keys(overrides: list[str]) -> list[str]:
    return [o.get_key_element() for o in parse_overrides(overrides) if o.is_sweep_override()]


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def affects_index(override: str) -> bool:
    return _key(override).startswith(INDEX_KEY_PREFIXES)


def index_redirect(combination: list[str], state_dir: str) -> list[str]:
    """
    Overrides that point a combination with its own chunking or model at its own collection files:
    the Milvus db, the L0 index and the decision vectors (an adapted model's side writes them too).
    """
    index_keys = sorted(o for o in combination if affects_index(o))
    if not index_keys:
        return []
    slug = hashlib.sha256("\n".join(index_keys).encode()).hexdigest()[:12]
    folder = Path(state_dir) / "sweep-index" / slug
    return [
        f"milvus.uri={folder}/milvus.db",
        f"l0.index_path={folder}/l0.json",
        f"embedder.decision_vectors={folder}/decision-vectors.npz",
    ]


@dataclass
class Trial:
    """One evaluated combination: its overrides (the swept part apart), metrics (each query set's apart), run id."""

    overrides: list[str]
    swept: list[str]
    metrics: dict[str, Any]
    run_id: str | None = None
    sets: dict[str, dict[str, Any]] = field(default_factory=dict)
    feasible: bool = True
    number: int = 0
    values: dict[str, list[float | None]] = field(default_factory=dict)  # per set, the paired metric's per query
    current: bool = False  # the settings in force when the sweep ran

    def value(self, metric: str) -> float:
        return metric_value(self.metrics, metric)

    @property
    def override_line(self) -> str:
        return " ".join(self.swept)


def metric_value(metrics: dict[str, Any], metric: str) -> float:
    """A pipeline metric by its report name (`hit@1`) or its MLflow name (`hit_at_1`); missing is -inf."""
    by_mlflow_name = {metric_name(k): v for k, v in metrics.items()}
    value = metrics.get(metric, by_mlflow_name.get(metric_name(metric)))
    return float(value) if isinstance(value, int | float) else float("-inf")


@dataclass
class SweepResult:
    trials: list[Trial]
    parent_run_id: str | None
    rank_by: str
    runs: RunLogger
    constraints: list[Any] = field(default_factory=list)
    verdict: Any = None  # pipelines/tuning/recommend.py's Verdict
    repeats: list[str] = field(default_factory=list)  # combinations that repeat an earlier setting
    guard: Any = None  # pipelines/tuning/guard_fit.py's GuardFit: the guard in effect

    def ranked(self) -> list[Trial]:
        """Feasible combinations first, each group best first by the ranking metric."""
        sign = 1.0 if rankable(self.rank_by) in LOWER_IS_BETTER else -1.0
        return sorted(self.trials, key=lambda trial: (not trial.feasible, sign * trial.value(self.rank_by)))

    @property
    def best(self) -> Trial | None:
        ranked = self.ranked()
        return ranked[0] if ranked and ranked[0].feasible else None


def run_sweep(
    overrides: list[str],
    queries: list[EvalQuery],
    queries_label: str,
    kb_path: str | None = None,
    baselines: bool = False,
    rank_by: str = "hit@1",
    experiment: str | None = None,
    say: Callable[[str], None] = logger.info,
    sets: list[Any] | None = None,
    constraints: list[Any] = (),
) -> SweepResult:
    """
    Evaluate every distinct combination of `overrides`, and the current settings, on `sets` (tuning and
    guard query sets; or `queries` as one set) under `constraints`; one child run each under one parent
    run. A combination with its own index re-indexes the knowledge base the base index holds (its
    manifest's), or `kb_path`, into its own folder, and `say`s so. The verdict is pipelines/tuning/recommend.py's.
    """
    from pipelines.tuning.guards import QuerySet, check_measurable

    rankable(rank_by)
    sets = sets or [QuerySet(Path(queries_label).stem, queries_label, queries, "tuning")]
    check_measurable(list(constraints), sets)
    combinations = expand(overrides)
    sweep_keys = swept_keys(overrides)
    base_cfg = load_config(combinations[0])
    runs = RunLogger.from_config(base_cfg, **({"experiment": experiment} if experiment else {}))
    if kb_path:
        index_first(base_cfg, kb_path)
    parent = runs.start(
        "sweep",
        tags={
            "queries": queries_label,
            "sweep.overrides": " ".join(overrides),
            "sweep.rank_by": rank_by,
            "sweep.constraints": " ".join(c.label for c in constraints),
        },
    )
    current = [o for o in overrides if not parse_overrides([o])[0].is_sweep_override()]
    try:
        guard = _fit_guard(current, kb_path, sets, list(constraints), say)
    except BaseException:
        runs.finish(parent, "FAILED")
        raise
    sets, constraints = guard.sets, guard.constraints
    sweep = _Sweep(sets, constraints, sweep_keys, kb_path, baselines, runs, parent, say, base_cfg, rank_by)
    try:
        for number, combination in enumerate(combinations):
            sweep.evaluate(combination, number, len(combinations))
        sweep.evaluate_current(current)
    except BaseException:
        runs.finish(parent, "FAILED")
        raise
    result = SweepResult(sweep.trials, parent, rank_by, runs, constraints, repeats=sweep.repeats, guard=guard)
    result.verdict = _verdict(result, base_cfg, sets)
    if parent is not None:
        from pipelines.tuning.recommend import Policy

        policy = Policy.from_config(base_cfg, rankable(rank_by))
        verdict_tags = {
            "sweep.constraints": " ".join(c.label for c in constraints),
            "sweep.guard": "\n".join(guard.lines()),
            "verdict.metric": policy.metric,
            "verdict.level": str(policy.level),
            "verdict.min_off_topic": str(base_cfg.guard.min_off_topic),
            "verdict.tuning_sets": " ".join(s.name for s in sets if s.role == "tuning"),
        }
        for key, value in verdict_tags.items():
            runs.client().set_tag(parent, key, value)
    _log_best(runs, parent, result)
    runs.finish(parent)
    return result


def _fit_guard(current: list[str], kb_path: str | None, sets: list[Any], constraints: list[Any], say):
    """The guard sets measured at the current settings (on the base index) and fitted to the knowledge base."""
    from pipelines.tuning.guard_fit import fit_guard, measure_guard

    cfg = load_config([*current, *([f"kb.path={kb_path}"] if kb_path else [])])
    guard = fit_guard(cfg, sets, constraints, measure_guard(cfg, sets))
    for line in guard.lines():
        say(line)
    return guard


def run_guarded_sweep(
    overrides: list[str],
    query_files: list[str],
    guard_files: list[str] = (),
    constraint_texts: list[str] = (),
    **options: Any,
) -> SweepResult:
    """
    A sweep under the configured guard (conf/guard/: its sets and constraints) plus `guard_files` and
    `constraint_texts` (`none` drops the configured constraints): what `knowledge eval -m` and the notebook run.
    """
    from pipelines.tuning.guards import guard_constraints, guard_sets, load_sets

    cfg = load_config([o for o in overrides if not parse_overrides([o])[0].is_sweep_override()])
    constraints = guard_constraints(cfg, [], list(constraint_texts), "guard.constraints")
    tuning = load_sets(list(query_files), "tuning")
    sets = [*tuning, *guard_sets(cfg, list(guard_files), tuning)]
    return run_sweep(overrides, [], ", ".join(query_files), sets=sets, constraints=constraints, **options)


@dataclass
class _Sweep:
    """The combinations evaluated so far, by the values of the swept keys: a repeated setting is not re-run."""

    sets: list[Any]
    constraints: list[Any]
    keys: list[str]
    kb_path: str | None
    baselines: bool
    runs: RunLogger
    parent: str | None
    say: Callable[[str], None]
    base_cfg: Any
    rank_by: str
    trials: list[Trial] = field(default_factory=list)
    seen: dict[tuple, Trial] = field(default_factory=dict)
    repeats: list[str] = field(default_factory=list)

    def config(self, combination: list[str]):
        redirect = index_redirect(combination, self.base_cfg.paths.state_dir)
        if self.kb_path:
            redirect.append(f"kb.path={self.kb_path}")
        return load_config([*combination, *redirect]), redirect

    def setting(self, cfg) -> tuple:
        from omegaconf import OmegaConf

        return tuple(repr(OmegaConf.select(cfg, key)) for key in self.keys)

    def evaluate(self, combination: list[str], number: int, total: int) -> Trial | None:
        swept = [o for o in combination if _key(o) in self.keys]
        cfg, redirect = self.config(combination)
        setting = self.setting(cfg)
        if setting in self.seen:
            self.repeats.append(" ".join(swept))
            self.say(f"{' '.join(swept)}: the same setting as {self.seen[setting].override_line}, not re-run")
            return None
        if redirect and any(affects_index(o) for o in combination):
            named = self.kb_path or any(_key(o) == "kb.path" for o in combination)
            kb = cfg.kb.path if named else indexed_kb(self.base_cfg)
            self.say(f"{' '.join(swept) or 'base'}: re-indexing {kb} into {Path(cfg.l0.index_path).parent}")
            index_first(cfg, kb, replace=True)  # its own folder: whatever it held before is stale
        trial = self._run(cfg, combination, swept, number)
        self.seen[setting] = trial
        self.say(f"combination {number + 1}/{total}: {_progress(trial, self.rank_by)}")
        return trial

    def evaluate_current(self, current: list[str]) -> None:
        """The settings in force, as a trial of their own unless a combination already is them."""
        cfg, _ = self.config(current)
        known = self.seen.get(self.setting(cfg))
        if known is not None:
            known.current = True
            if known.run_id is not None:
                self.runs.client().set_tag(known.run_id, CURRENT_TAG, "true")
            return
        from omegaconf import OmegaConf

        swept = [f"{key}={OmegaConf.select(cfg, key)}" for key in self.keys]
        trial = self._run(cfg, [*current, *swept], swept, len(self.trials) + len(self.repeats))
        trial.current = True
        if trial.run_id is not None:
            self.runs.client().set_tag(trial.run_id, CURRENT_TAG, "true")
        self.say(f"current settings: {_progress(trial, self.rank_by)}")

    def _run(self, cfg, combination: list[str], swept: list[str], number: int) -> Trial:
        from pipelines.tuning.guards import evaluate_sets, feasible
        from pipelines.tuning.recommend import Policy, set_values

        logger.info("Sweep combination %d: %s", number + 1, " ".join(swept))
        evaluation, per_set = evaluate_sets(cfg, self.sets, build_systems(cfg, self.baselines))
        ok = feasible(self.constraints, per_set)
        run_id = self.runs.log_evaluation(
            evaluation, cfg, run_name=" ".join(swept) or "base", parent_id=self.parent, tags=_trial_tags(swept, ok)
        )
        metrics = evaluation.report["systems"]["pipeline"]
        trial = Trial(combination, swept, metrics, run_id, sets=per_set, feasible=ok, number=number)
        policy = Policy.from_config(self.base_cfg, rankable(self.rank_by))
        trial.values = set_values(self.sets, evaluation.answers["pipeline"], policy.metric)
        if run_id is not None:  # what the notebook needs to give the same verdict from the runs
            self.runs.client().log_dict(run_id, trial.values, PAIRED_VALUES_ARTIFACT)
        self.trials.append(trial)
        return trial


def _progress(trial: Trial, rank_by: str) -> str:
    """One line per evaluated setting, printed as the sweep goes."""
    mark = "feasible" if trial.feasible else "infeasible"
    return f"{rank_by} {_fmt(trial.value(rank_by))}, {mark}: {trial.override_line or 'base'}"


def _verdict(result: SweepResult, cfg, sets: list[Any]):
    """The sweep's verdict: the best feasible combination against the current settings."""
    from pipelines.tuning.recommend import Policy

    tuning = [s.name for s in sets if s.role == "tuning"]
    return sweep_verdict(
        result, Policy.from_config(cfg, rankable(result.rank_by)), int(cfg.guard.min_off_topic), tuning
    )


def sweep_verdict(result: SweepResult, policy, min_off_topic: int, tuning: list[str]):
    """The one recommendation rule (pipelines/tuning/recommend.py) over a sweep's trials, as run or read back."""
    from pipelines.tuning.guards import untested_guards
    from pipelines.tuning.recommend import Candidate, recommend

    def candidate(trial: Trial | None) -> Candidate | None:
        return None if trial is None else Candidate(trial.override_line, trial.sets, trial.values)

    current = next(t for t in result.trials if t.current)
    unguarded = untested_guards(result.constraints, [t.sets for t in result.trials], min_off_topic)
    return recommend(candidate(current), candidate(result.best), result.constraints, policy, tuning, unguarded)


def _trial_tags(swept: list[str], feasible: bool) -> dict[str, str]:
    return {"sweep.combination": " ".join(swept), "sweep.feasible": str(feasible).lower()}


def _log_best(runs: RunLogger, parent: str | None, result: SweepResult) -> None:
    best = result.best
    if parent is None or best is None:
        return
    runs.log_metrics(parent, {f"best.{metric_name(result.rank_by)}": best.value(result.rank_by)})
    from mlflow import MlflowClient

    client = MlflowClient(runs.tracking_uri)
    if result.verdict.recommended is not None:
        client.set_tag(parent, "best.overrides", best.override_line)
    else:
        client.set_tag(parent, "best.kept", result.verdict.reason)


def format_ranking(result: SweepResult, columns: tuple[str, ...] = ()) -> str:
    """The combinations, feasible ones first, best first by the ranking metric, with the guard metrics beside."""
    columns = tuple(dict.fromkeys((result.rank_by, *(columns or DEFAULT_COLUMNS))))
    width = max([len(t.override_line) for t in result.trials] + [len("combination")])
    lines = [_ranking_header(result.constraints, columns, width)]
    for place, trial in enumerate(result.ranked(), start=1):
        cells = "".join(f"{_fmt(metric_value(trial.metrics, c)):>18}" for c in columns)
        mark = "  (current)" if trial.current else ""
        lines.append(
            f"{place:>3}  {trial.override_line:<{width}}{cells}{_guard_cells(trial, result.constraints)}{mark}"
        )
    return "\n".join(lines + _ranking_notes(result))


def _ranking_header(constraints: list[Any], columns: tuple[str, ...], width: int) -> str:
    header = f"{'#':>3}  {'combination':<{width}}" + "".join(f"{c:>18}" for c in columns)
    return header + "".join(f"  {c.label}" for c in constraints) + ("  feasible" if constraints else "")


def _guard_cells(trial: Trial, constraints: list[Any]) -> str:
    """Each guard's value on the trial, as wide as its label, then whether the trial keeps them all."""
    if not constraints:
        return ""
    cells = "".join(f"  {_fmt(_guard_value(c, trial)):>{len(c.label)}}" for c in constraints)
    broken = [c.label for c in constraints if c.violation(trial.sets) > 0]
    return cells + "  " + ("yes" if not broken else "NO: " + ", ".join(broken))


def _guard_value(constraint: Any, trial: Trial) -> float:
    value = constraint.value(trial.sets)
    return -math.inf if value is None else value


def _ranking_notes(result: SweepResult) -> list[str]:
    """What follows the table: the repeated combinations, the missing best, the guard and the verdict."""
    lines = []
    if result.repeats:
        lines.append(f"not re-run (the same setting as a row above): {'; '.join(result.repeats)}")
    if result.best is None and result.trials:
        guards = ", ".join(c.label for c in result.constraints)
        lines.append(f"no combination met the constraints ({guards}): no best setting")
    if result.guard is not None:
        lines += result.guard.lines()
    if result.verdict is not None:
        lines += result.verdict.lines()
    return lines


DEFAULT_COLUMNS = ("hit@1", "mrr@10", "ndcg@10", "answer_rate", "no_evidence_rate", "fallback_rate")


def _fmt(value: float) -> str:
    return "-" if value == float("-inf") else f"{value:.3f}"
