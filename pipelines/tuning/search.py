"""
A bounded, guarded Optuna search over query-time settings (rerank weights, thresholds) for
`knowledge eval --search NAME --trials N`.

The search space is `conf/search/NAME.yaml` (or a path to such a file; pipelines/tuning/space.py):
the metric to optimise, the distribution of each key and the constraints a setting must meet
(pipelines/tuning/guards.py).
The constraints go to Optuna's own constrained TPE (`constraints_func`): the best trial is chosen
among feasible trials only, and a search with no feasible trial prints no best. Each trial is one
MLflow child run; the best trial and the defaults are both judged on held-out queries (a seeded
split or held-out files) and on the guard sets. The study lives in `paths.state_dir/optuna.db`, so
a search can be resumed (`--resume`) and opened in optuna-dashboard.
"""

import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from components.errors import first_line
from pipelines.evaluation import build_systems
from pipelines.settings import ConfigError, load_config
from pipelines.tuning.guards import (
    Constraint,
    QuerySet,
    check_measurable,
    evaluate_sets,
    feasible,
    set_violations,
    violated,
)
from pipelines.tuning.runs import RunLogger, metric_name
from pipelines.tuning.space import SearchSpace
from pipelines.tuning.sweep import Trial, metric_value

logger = logging.getLogger(__name__)

STUDY_FILE = "optuna.db"
IMPORTANCES_ARTIFACT = "param_importances.json"
# Optuna user attributes: what a trial needs to be shown again when its study is resumed.
_ATTRS = ("overrides", "metrics", "sets", "run_id")


@dataclass
class Judged:
    """A setting (the best, or the defaults) scored on some sets: pooled metrics and each set apart."""

    metrics: dict[str, Any]
    sets: dict[str, dict[str, Any]]


@dataclass
class SearchResult:
    space: SearchSpace
    constraints: list[Constraint]
    trials: list[Trial]
    best: Trial | None
    judged: dict[str, Judged]  # "best on tuning", "default on tuning", "best on held-out", ...
    study_name: str
    storage: str
    parent_run_id: str | None
    runs: RunLogger
    roles: dict[str, str] = field(default_factory=dict)  # set name -> tuning, guard, held-out

    @property
    def override_line(self) -> str:
        return " ".join(self.best.overrides) if self.best else ""

    @property
    def held_out_breaks(self) -> list[str]:
        """The constraints the best setting breaks on the held-out sets ("LABEL on SET"): a best that does not carry over."""
        judged = self.judged.get("best on held-out")
        if self.best is None or judged is None:
            return []
        return [
            f"{label} on {name}"
            for name, values in judged.sets.items()
            for label in set_violations(self.constraints, name, values)
        ]

    @property
    def recommended(self) -> Trial | None:
        """The best trial, if it also keeps every constraint on the held-out queries; else nothing to recommend."""
        return self.best if self.best is not None and not self.held_out_breaks else None


def study_storage(state_dir: str) -> str:
    folder = Path(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder.resolve() / STUDY_FILE}"


def _study_summaries(storage: str) -> list[Any]:
    """The studies of the storage; a damaged study file is named with what to do, not as a bare sqlite error."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return optuna.get_all_study_summaries(storage)
    except SQLAlchemyError as exc:
        path = storage.removeprefix("sqlite:///")
        raise ConfigError(
            f"the study file {path} is damaged ({first_line(exc)}): move it away to start again (its studies are "
            "lost), or give another paths.state_dir"
        ) from exc


def open_study(storage: str, space: SearchSpace, study_name: str | None, resume: bool, seed: int, constraints):
    """A new study, or with `resume` the named (or latest) study of this space; Optuna's constrained TPE either way."""
    import warnings

    import optuna

    # constraints_func is marked experimental in Optuna 4; it is the documented way to constrain TPE.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    names = {s.study_name: s for s in _study_summaries(storage)}
    if resume and study_name is None:
        mine = [s for s in names.values() if s.user_attrs.get("space") == space.name]
        if not mine:
            raise ConfigError(f"--resume: no study of search={space.name} in {storage}; start one without --resume")
        study_name = max(mine, key=lambda s: s.datetime_start or datetime.min).study_name
    if resume and study_name not in names:
        raise ConfigError(
            f"--resume: no study {study_name!r} in {storage}; known: {', '.join(sorted(names)) or 'none'}"
        )
    if not resume and study_name in names:
        raise ConfigError(f"study {study_name!r} exists in {storage}: --resume continues it, or give another --study")
    study_name = study_name or f"{space.name}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:4]}"
    # A resumed study moves the seed on by its trials: the same seed would draw the same startup settings again.
    done = names[study_name].n_trials if resume else 0
    sampler = optuna.samplers.TPESampler(seed=seed + done, constraints_func=_constraint_values)
    study = optuna.create_study(
        storage=storage, study_name=study_name, direction=space.direction, sampler=sampler, load_if_exists=resume
    )
    if resume:
        _check_same_search(study, space, constraints)
    else:
        study.set_user_attr("space", space.name)
        study.set_user_attr("metric", space.metric)
        study.set_user_attr("constraints", [c.label for c in constraints])
    return study


def _check_same_search(study, space: SearchSpace, constraints: list[Constraint]) -> None:
    attrs = study.user_attrs
    if attrs.get("space") != space.name or attrs.get("constraints") != [c.label for c in constraints]:
        raise ConfigError(
            f"--resume: study {study.study_name!r} is search={attrs.get('space')} under "
            f"{', '.join(attrs.get('constraints') or []) or 'no constraints'}, not search={space.name} under "
            f"{', '.join(c.label for c in constraints) or 'no constraints'}"
        )


def _constraint_values(trial) -> list[float]:
    """Optuna's constraints_func: the values the objective stored (a failed trial counts as infeasible)."""
    return trial.user_attrs.get("constraint_values", [float("inf")])


def run_search(
    space: SearchSpace,
    base_overrides: list[str],
    tuning: list[QuerySet],
    guards: list[QuerySet],
    held_out: list[QuerySet],
    trials: int,
    seed: int = 0,
    constraints: list[Constraint] | None = None,
    study_name: str | None = None,
    resume: bool = False,
    experiment: str | None = None,
) -> SearchResult:
    """Run `trials` constrained Optuna trials on the tuning and guard sets, then judge the best and the defaults."""
    import optuna

    if trials < 1:
        raise ConfigError(f"--trials {trials} must be at least 1")
    constraints = list(constraints or [])
    check_measurable(constraints, [*tuning, *guards])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base_cfg = load_config(base_overrides)
    storage = study_storage(base_cfg.paths.state_dir)
    study = open_study(storage, space, study_name, resume, seed, constraints)
    runs = RunLogger.from_config(base_cfg, **({"experiment": experiment} if experiment else {}))
    label = ", ".join(s.path for s in tuning)
    parent = runs.start(
        f"search {space.name}",
        tags={
            "queries": label,
            "search.space": space.name,
            "search.seed": str(seed),
            "search.metric": space.metric,
            "search.constraints": " ".join(c.label for c in constraints),
            "search.study": study.study_name,
            "search.storage": storage,
        },
    )

    def objective(trial) -> float:
        overrides = space.suggest(trial)
        cfg = load_config([*base_overrides, *overrides])
        evaluation, per_set = evaluate_sets(cfg, [*tuning, *guards], build_systems(cfg, baselines=False))
        metrics = evaluation.report["systems"]["pipeline"]
        run_id = runs.log_evaluation(
            evaluation,
            cfg,
            run_name=f"trial {trial.number}",
            parent_id=parent,
            tags={
                "search.trial": str(trial.number),
                "search.overrides": " ".join(overrides),
                "search.feasible": str(feasible(constraints, per_set)).lower(),
            },
        )
        for name, value in zip(_ATTRS, (overrides, metrics, per_set, run_id), strict=True):
            trial.set_user_attr(name, json.loads(json.dumps(value)))
        trial.set_user_attr("constraint_values", [c.violation(per_set) for c in constraints])
        return space.objective(metrics)

    try:
        study.optimize(objective, n_trials=trials)
        done = [_trial_of(t, constraints) for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        best = _best(study, done)
        judged = _judge(base_overrides, best, tuning, guards, held_out)
    except BaseException:
        runs.finish(parent, "FAILED")
        raise
    result = SearchResult(
        space,
        constraints,
        done,
        best,
        judged,
        study.study_name,
        storage,
        parent,
        runs,
        _roles(tuning, guards, held_out),
    )
    _log_search(result, study)
    runs.finish(parent)
    return result


def _trial_of(frozen, constraints: list[Constraint]) -> Trial:
    attrs = frozen.user_attrs
    per_set = attrs.get("sets") or {}
    trial = Trial(attrs["overrides"], attrs["overrides"], attrs["metrics"], attrs.get("run_id"), sets=per_set)
    trial.number = frozen.number
    trial.feasible = feasible(constraints, per_set)
    return trial


def _best(study, done: list[Trial]) -> Trial | None:
    try:
        number = study.best_trial.number  # Optuna picks among feasible trials only; ValueError when none is
    except ValueError:
        return None
    return next(t for t in done if t.number == number)


def _roles(*groups: list[QuerySet]) -> dict[str, str]:
    roles: dict[str, str] = {}
    for group in groups:
        for query_set in group:
            roles.setdefault(query_set.name, query_set.role)
    return roles


def _judge(base_overrides, best: Trial | None, tuning, guards, held_out) -> dict[str, Judged]:
    """The defaults (and the best, if any) on the tuning + guard sets and on the held-out sets."""
    settings = {"default": base_overrides}
    if best is not None:
        settings["best"] = [*base_overrides, *best.overrides]
    judged = {}
    for name, overrides in settings.items():
        cfg = load_config(overrides)
        systems = build_systems(cfg, baselines=False)
        for where, sets in (("tuning", [*tuning, *guards]), ("held-out", held_out)):
            if best is not None and name == "best" and where == "tuning":
                judged[f"{name} on {where}"] = Judged(best.metrics, best.sets)
                continue
            evaluation, per_set = evaluate_sets(cfg, sets, systems)
            metrics = evaluation.report["systems"]["pipeline"] if where == "tuning" else _pooled(evaluation, held_out)
            judged[f"{name} on {where}"] = Judged(metrics, per_set)
    return judged


def _pooled(evaluation, held_out: list[QuerySet]) -> dict[str, Any]:
    """The pipeline metrics of the held-out queries pooled (the guard sets apart)."""
    from pipelines.evaluation_metrics import score

    count = sum(len(s.queries) for s in held_out)
    return score([q for s in held_out for q in s.queries], evaluation.answers["pipeline"][:count])


def _log_search(result: SearchResult, study) -> None:
    runs, parent = result.runs, result.parent_run_id
    if parent is None:
        return
    from mlflow import MlflowClient

    from pipelines.tuning.runs import flatten_metrics

    client = MlflowClient(runs.tracking_uri)
    metrics: dict[str, float] = {"feasible_trials": float(sum(t.feasible for t in result.trials))}
    if result.best is not None:
        metrics[f"best.{metric_name(result.space.metric)}"] = result.space.objective(result.best.metrics)
    for key, judged in result.judged.items():
        who, where = key.split(" on ")
        prefix = "holdout" if where == "held-out" else "tuning"
        metrics.update(flatten_metrics(judged.metrics, f"{prefix}.{who}."))
        for name, values in judged.sets.items():
            metrics.update(flatten_metrics(values, f"{prefix}.{who}.set.{name}."))
    runs.log_metrics(parent, metrics)
    if result.recommended is not None:
        client.set_tag(parent, "best.overrides", result.override_line)
    elif result.best is not None:
        client.set_tag(parent, "best.rejected", f"{result.override_line}: breaks {', '.join(result.held_out_breaks)}")
    importances = param_importances(study)
    if importances is not None:
        client.log_dict(parent, importances, IMPORTANCES_ARTIFACT)


def param_importances(study) -> dict[str, Any] | None:
    """Optuna's parameter importances (fANOVA) over the study's trials; None with too few trials to tell."""
    import optuna

    try:
        importances = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError) as exc:  # fewer than two completed trials, or no variance to explain
        logger.info("No parameter importances for study %s: %s", study.study_name, exc)
        return None
    return {"study": study.study_name, "evaluator": "fanova", "importances": dict(importances)}


def format_search(result: SearchResult) -> str:
    """Every trial (feasible ones first, best first) with its guard metrics; then best vs defaults per set."""
    space, constraints = result.space, result.constraints
    metric = space.metric
    feasible_count = sum(t.feasible for t in result.trials)
    lines = [
        f"{len(result.trials)} trials of search={space.name} (study {result.study_name} in {result.storage}), "
        f"{feasible_count} feasible under {', '.join(c.label for c in constraints) or 'no constraints'}; "
        f"{metric} on {', '.join(n for n, r in result.roles.items() if r == 'tuning')}:",
    ]
    header = [f"{'trial':>5}", f"{metric:>8}", f"{'mrr@10':>8}", *(f"{c.label:>{len(c.label)}}" for c in constraints)]
    lines.append("  ".join([*header, "feasible", "setting"]))
    ordered = sorted(result.trials, key=lambda t: (not t.feasible, space.better_first(space.objective(t.metrics))))
    for trial in ordered:
        cells = [f"{trial.number:>5}", f"{_fmt(metric_value(trial.metrics, metric)):>8}"]
        cells.append(f"{_fmt(metric_value(trial.metrics, 'mrr@10')):>8}")
        cells += [f"{_fmt(c.value(trial.sets)):>{len(c.label)}}" for c in constraints]
        mark = "yes" if trial.feasible else "NO: " + ", ".join(violated(constraints, trial.sets))
        lines.append("  ".join([*cells, f"{mark:<8}", trial.override_line]))
    lines += _judged_lines(result)
    default = result.judged["default on tuning"]
    if feasible(constraints, default.sets) and (
        result.best is None
        or space.better_first(space.objective(default.metrics))
        < space.better_first(space.objective(result.best.metrics))
    ):
        lines.append("the defaults meet the constraints and score better on the tuning queries: keep them")
    if result.best is None:
        lines.append("no trial met the constraints: no best setting (more --trials, a wider space or other bounds)")
    elif result.held_out_breaks:
        lines.append(
            f"no setting to recommend: the best trial ({result.override_line}) breaks "
            f"{', '.join(result.held_out_breaks)} (held out): it does not carry over "
            "(more --trials, a wider space or other bounds)"
        )
    else:
        lines.append(f"best setting: {result.override_line}")
    return "\n".join(lines)


def _judged_lines(result: SearchResult) -> list[str]:
    """Per set, the best and the defaults; a held-out part keeps its file's name, a guard set is shown once."""
    columns = tuple(dict.fromkeys((result.space.metric, "mrr@10", "answer_rate", "no_evidence_rate")))
    lines = ["best vs defaults, each query set apart (guard sets are scored in every trial):"]
    lines.append(f"  {'set':<28}{'role':<10}{'setting':<9}" + "".join(f"{c:>18}" for c in columns) + "  constraints")
    for where in ("tuning", "held-out"):
        names = result.judged[f"default on {where}"].sets
        for name in names:
            role = result.roles.get(name, where)
            for who in ("best", "default"):
                judged = result.judged.get(f"{who} on {where}")
                if judged is None:
                    continue
                values = judged.sets[name]
                broken = set_violations(result.constraints, name, values)
                cells = "".join(f"{_fmt(metric_value(values, c)):>18}" for c in columns)
                shown_role = "held-out" if where == "held-out" else role
                status = "violates " + ", ".join(broken) if broken else "ok"
                lines.append(f"  {name:<28}{shown_role:<10}{who:<9}{cells}  {status}")
    return lines


def _fmt(value: float | None) -> str:
    return "-" if value is None or value == float("-inf") else f"{value:.3f}"
