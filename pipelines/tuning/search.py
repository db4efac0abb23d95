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
from dataclasses import dataclass, field
from typing import Any

from pipelines.config.interrupts import InterruptLatch, interrupt_latch
from pipelines.config.settings import ConfigError, load_config
from pipelines.evaluation.run import build_systems
from pipelines.tuning.guards import (
    Constraint,
    QuerySet,
    check_measurable,
    feasible,
    set_violations,
    untested_guards,
    violated,
)
from pipelines.tuning.measured import MeasuredSets
from pipelines.tuning.recommend import Policy, set_values
from pipelines.tuning.runs import RunLogger, metric_name
from pipelines.tuning.space import SearchSpace
from pipelines.tuning.study import (
    CURRENT_ATTR,
    IMPORTANCES_ARTIFACT,
    enqueue_current,
    evaluated_settings,
    evaluated_state,
    finish_trial,
    format_value,
    interrupted_error,
    open_study,
    param_importances,
    progress_printer,
    quiet_raised_trial_failures,
    study_storage,
)
from pipelines.tuning.sweep import Trial, metric_value

logger = logging.getLogger(__name__)

# Optuna user attributes: what a trial needs to be shown again when its study is resumed (or repeated).
_ATTRS = ("overrides", "metrics", "sets", "run_id", "values")


@dataclass
class Judged:
    """A setting (the best, or the defaults) scored on some sets: pooled metrics and each set apart."""

    metrics: dict[str, Any]
    sets: dict[str, dict[str, Any]]
    values: dict[str, list[float | None]] = field(default_factory=dict)


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
    verdict: Any = None  # pipelines/tuning/recommend.py's Verdict
    repeats: int = 0  # trials that drew a setting already evaluated (not re-run)
    guard: Any = None  # pipelines/tuning/guard_fit.py's GuardFit: the guard in effect
    bounds: list[str] = field(default_factory=list)  # the bounds of each query set of the search's own, one line each
    held_out_bounds: list[Constraint] = field(default_factory=list)  # of held-out files: no trial scores them

    @property
    def judged_by(self) -> list[Constraint]:
        """What the best and the defaults are judged by: the trials' constraints and the held-out files' bounds."""
        return [*self.constraints, *self.held_out_bounds]

    @property
    def override_line(self) -> str:
        return " ".join(self.best.overrides) if self.best else ""

    @property
    def recommended(self) -> Trial | None:
        """The best trial, if the recommendation rule picks it over the current settings."""
        return self.best if self.verdict is not None and self.verdict.recommended is not None else None


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
    say=logger.info,
    study_file: str | None = None,
    held_out_bounds: list[Constraint] = (),
    measured: MeasuredSets | None = None,
    latch: InterruptLatch | None = None,
) -> SearchResult:
    """Run `trials` constrained Optuna trials on the tuning and guard sets, then judge the best and the defaults."""
    import optuna

    if trials < 1:
        raise ConfigError(f"--trials {trials} must be at least 1")
    constraints = list(constraints or [])
    check_measurable(constraints, [*tuning, *guards])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    quiet_raised_trial_failures()
    base_cfg = load_config(base_overrides)
    storage = study_storage(base_cfg.paths.state_dir, study_file)
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

    policy = Policy.from_config(base_cfg, space.metric)
    measured = measured or MeasuredSets()  # the current settings measured before the search are not run again
    evaluated = evaluated_settings(study)

    latch = latch or InterruptLatch()  # held below: a Ctrl+C that a library swallowed still ends the search

    def objective(trial) -> float:
        latch.check()
        overrides = space.suggest(trial)
        if tuple(overrides) in evaluated:  # Optuna drew a setting it already has: copy it, do not evaluate it again
            number, attrs = evaluated[tuple(overrides)]
            for name in (*_ATTRS, "constraint_values"):
                trial.set_user_attr(name, attrs[name])
            trial.set_user_attr("repeat_of", number)
            return finish_trial(trial, space.objective(attrs["metrics"]), attrs["constraint_values"])
        cfg = load_config([*base_overrides, *overrides])
        sets = [*tuning, *guards]
        evaluation, per_set = measured.evaluate(cfg, sets, lambda: build_systems(cfg, baselines=False))
        latch.check()  # an interrupted trial is not recorded, even when its interrupt was swallowed
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
        values = set_values(sets, evaluation.answers["pipeline"], policy.metric)
        attrs = dict(zip(_ATTRS, (overrides, metrics, per_set, run_id, values), strict=True))
        attrs["constraint_values"] = [c.violation(per_set) for c in constraints]
        for name, value in attrs.items():
            trial.set_user_attr(name, json.loads(json.dumps(value)))
        evaluated[tuple(overrides)] = (trial.number, attrs)
        return finish_trial(trial, space.objective(metrics), attrs["constraint_values"])

    finished_before = sum(evaluated_state(t) for t in study.trials)
    try:
        with interrupt_latch(latch):
            enqueue_current(study, space, base_cfg)
            study.optimize(objective, n_trials=trials, callbacks=[progress_printer(space, constraints, trials, say)])
            done = [
                _trial_of(t, constraints)
                for t in study.trials
                if evaluated_state(t) and "repeat_of" not in t.user_attrs
            ]
            best = _best(space, done)
            judged = _judge(base_overrides, best, done, tuning, guards, held_out, policy.metric, measured)
            latch.check()
    except KeyboardInterrupt as exc:
        runs.finish(parent, "KILLED")
        finished = sum(evaluated_state(t) for t in study.trials) - finished_before
        raise interrupted_error(study, storage, finished, trials) from exc
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
    result.repeats = sum("repeat_of" in t.user_attrs for t in study.trials)
    result.held_out_bounds = list(held_out_bounds)
    result.verdict = _verdict(result, base_cfg, policy, held_out or tuning)
    _log_search(result, study)
    runs.finish(parent)
    return result


def _verdict(result: "SearchResult", cfg, policy, paired: list[QuerySet]):
    """The recommendation rule (pipelines/tuning/recommend.py): the best trial against the current settings."""
    from pipelines.tuning.recommend import Candidate, recommend

    def candidate(who: str) -> Candidate | None:
        if who == "best" and result.best is None:
            return None
        label = result.override_line if who == "best" else "the current settings"
        tuned, held = result.judged[f"{who} on tuning"], result.judged.get(f"{who} on held-out")
        values = {f"tuning:{name}": v for name, v in tuned.values.items()}
        values.update({f"held-out:{name}": v for name, v in (held.values if held else {}).items()})
        return Candidate(label, tuned.sets, values, held.sets if held else {})

    where = "held-out" if paired and paired[0].role == "held-out" else "tuning"
    unguarded = untested_guards(result.constraints, [t.sets for t in result.trials], int(cfg.guard.min_off_topic))
    current = candidate("default")
    if result.best is not None and result.best.current:
        current.label = result.override_line
    names = [f"{where}:{s.name}" for s in paired]
    # A kept setting names the bounds the trials were held to: they are this knowledge base's own.
    under = f" under {', '.join(c.label for c in result.judged_by)}" if result.judged_by else ""
    return recommend(current, candidate("best"), result.judged_by, policy, names, unguarded, under)


def _trial_of(frozen, constraints: list[Constraint]) -> Trial:
    attrs = frozen.user_attrs
    per_set = attrs.get("sets") or {}
    trial = Trial(attrs["overrides"], attrs["overrides"], attrs["metrics"], attrs.get("run_id"), sets=per_set)
    trial.number = frozen.number
    trial.feasible = feasible(constraints, per_set)
    trial.values = attrs.get("values") or {}
    trial.current = bool(attrs.get(CURRENT_ATTR))
    return trial


def _best(space: SearchSpace, done: list[Trial]) -> Trial | None:
    """The feasible trial with the best objective (the earliest of equals), as Optuna's constrained best_trial picks."""
    feasible_trials = [t for t in done if t.feasible]
    if not feasible_trials:
        return None
    return min(feasible_trials, key=lambda t: (space.better_first(space.objective(t.metrics)), t.number))


def _roles(*groups: list[QuerySet]) -> dict[str, str]:
    roles: dict[str, str] = {}
    for group in groups:
        for query_set in group:
            roles.setdefault(query_set.name, query_set.role)
    return roles


def _judge(base_overrides, best: Trial | None, done: list[Trial], tuning, guards, held_out, metric: str, measured):
    """
    The defaults (and the best, if any) on the tuning + guard sets and on the held-out sets; what a
    trial already scored (the best's, and the current settings' trial on the tuning sets) is not re-run.
    """
    current = next((t for t in done if t.current), None)
    settings = {"default": (base_overrides, current)}
    if best is not None:
        settings["best"] = ([*base_overrides, *best.overrides], best)
    judged = {}
    for name, (overrides, trial) in settings.items():
        cfg = load_config(overrides)
        for where, sets in (("tuning", [*tuning, *guards]), ("held-out", held_out)):
            if where == "tuning" and trial is not None:
                judged[f"{name} on {where}"] = Judged(trial.metrics, trial.sets, trial.values)
                continue
            if (
                where == "held-out"
                and name == "best"
                and best is not None
                and best.current
                and "default on held-out" in judged
            ):
                judged[f"{name} on {where}"] = judged["default on held-out"]
                continue
            evaluation, per_set = measured.evaluate(cfg, sets, lambda cfg=cfg: build_systems(cfg, baselines=False))
            metrics = evaluation.report["systems"]["pipeline"] if where == "tuning" else _pooled(evaluation, held_out)
            values = set_values(sets, evaluation.answers["pipeline"], metric)
            judged[f"{name} on {where}"] = Judged(metrics, per_set, values)
    return judged


def _pooled(evaluation, held_out: list[QuerySet]) -> dict[str, Any]:
    """The pipeline metrics of the held-out queries pooled (the guard sets apart)."""
    from pipelines.evaluation.metrics import score

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
    else:
        client.set_tag(parent, "best.kept", result.verdict.reason)
    importances = param_importances(study)
    if importances is not None:
        client.log_dict(parent, importances, IMPORTANCES_ARTIFACT)


def format_search(result: SearchResult) -> str:
    """Every trial (feasible ones first, best first) with its guard metrics; then best vs defaults per set."""
    space = result.space
    ordered = sorted(result.trials, key=lambda t: (not t.feasible, space.better_first(space.objective(t.metrics))))
    lines = [_search_title(result), _trial_header(space.metric, result.constraints)]
    lines += [_trial_row(trial, space.metric, result.constraints) for trial in ordered]
    return "\n".join(lines + _judged_lines(result) + _search_notes(result))


def _search_title(result: SearchResult) -> str:
    feasible_count = sum(t.feasible for t in result.trials)
    guards = ", ".join(c.label for c in result.constraints) or "no constraints"
    tuning_sets = ", ".join(n for n, r in result.roles.items() if r == "tuning")
    return (
        f"{len(result.trials) + result.repeats} trials of search={result.space.name} (study {result.study_name} in "
        f"{result.storage}), {len(result.trials)} distinct settings, {feasible_count} feasible under {guards}; "
        f"{result.space.metric} on {tuning_sets}:"
    )


def _trial_header(metric: str, constraints: list[Constraint]) -> str:
    header = [f"{'trial':>5}", f"{metric:>8}", f"{'mrr@10':>8}", *(f"{c.label:>{len(c.label)}}" for c in constraints)]
    return "  ".join([*header, "feasible", "setting"])


def _trial_row(trial: Trial, metric: str, constraints: list[Constraint]) -> str:
    cells = [f"{trial.number:>5}", f"{format_value(metric_value(trial.metrics, metric)):>8}"]
    cells.append(f"{format_value(metric_value(trial.metrics, 'mrr@10')):>8}")
    cells += [f"{format_value(c.value(trial.sets)):>{len(c.label)}}" for c in constraints]
    mark = "yes" if trial.feasible else "NO: " + ", ".join(violated(constraints, trial.sets))
    current = "  (current)" if trial.current else ""
    return "  ".join([*cells, f"{mark:<8}", trial.override_line]) + current


def _search_notes(result: SearchResult) -> list[str]:
    """What follows the tables: the repeated draws, the missing best, the guard and the verdict."""
    lines = []
    if result.repeats:
        lines.append(f"{result.repeats} trials drew a setting already evaluated and were not re-run")
    if result.best is None:
        lines.append("no trial met the constraints: no best setting (more --trials, a wider space or other bounds)")
    lines += result.guard.lines() if result.guard is not None else []
    return lines + result.bounds + result.verdict.lines()


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
                broken = set_violations(result.judged_by, name, values)
                cells = "".join(f"{format_value(metric_value(values, c)):>18}" for c in columns)
                shown_role = "held-out" if where == "held-out" else role
                status = "violates " + ", ".join(broken) if broken else "ok"
                lines.append(f"  {name:<28}{shown_role:<10}{who:<9}{cells}  {status}")
    return lines
