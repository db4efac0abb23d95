"""
A bounded Optuna search over query-time settings (rerank weights, thresholds) for
`knowledge eval --search NAME --trials N`.

The search space is a config group, `conf/search/NAME.yaml`. Each trial is one MLflow child run
under a parent run; the queries are split into a tuning part and a held-out part (or a held-out
file is given), and the best trial is evaluated on the held-out queries beside the defaults, so
a tuned setting is not judged on the queries it was tuned on. A seed makes the search repeatable.
"""

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pipelines.evaluation import EvalQuery, build_systems, evaluate
from pipelines.settings import CONF_DIR, ConfigError, load_config
from pipelines.tuning.runs import RunLogger, metric_name
from pipelines.tuning.sweep import Trial, affects_index, metric_value

logger = logging.getLogger(__name__)

SEARCH_GROUP = "search"


@dataclass
class SearchSpace:
    """One `conf/search/*.yaml`: what to maximise and the distribution of each config key."""

    name: str
    metric: str
    direction: str
    space: dict[str, dict[str, Any]]
    min_no_evidence_rate: float | None = None

    @classmethod
    def load(cls, name: str, config_dir: Path | None = None) -> "SearchSpace":
        folder = (config_dir or CONF_DIR) / SEARCH_GROUP
        path = folder / f"{name}.yaml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
            raise ConfigError(f"search={name}: no {path.name} in {folder}; known: {known}")
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        space = cls(
            name=name,
            metric=str(data.get("metric", "hit@1")),
            direction=str(data.get("direction", "maximize")),
            space=dict(data.get("space") or {}),
            min_no_evidence_rate=data.get("min_no_evidence_rate"),
        )
        space.check()
        return space

    def check(self) -> None:
        if self.direction not in ("maximize", "minimize"):
            raise ConfigError(f"search={self.name}: direction must be maximize or minimize, not {self.direction!r}")
        if not self.space:
            raise ConfigError(f"search={self.name}: the space is empty")
        for key, spec in self.space.items():
            if affects_index(f"{key}="):
                raise ConfigError(f"search={self.name}: {key} changes the index; search query-time keys only")
            if not isinstance(spec, dict) or not ("choices" in spec or {"low", "high"} <= set(spec)):
                raise ConfigError(f"search={self.name}: {key} needs {{low, high[, step]}} or {{choices: [...]}}")

    def suggest(self, trial) -> list[str]:
        """The trial's overrides, one per key of the space."""
        overrides = []
        for key, spec in self.space.items():
            if "choices" in spec:
                value = trial.suggest_categorical(key, list(spec["choices"]))
            elif all(isinstance(spec[bound], int) for bound in ("low", "high")) and "step" not in spec:
                value = trial.suggest_int(key, spec["low"], spec["high"])
            else:
                value = trial.suggest_float(key, float(spec["low"]), float(spec["high"]), step=spec.get("step"))
                value = round(value, 6)
            overrides.append(f"{key}={value}")
        return overrides

    def objective(self, metrics: dict[str, Any]) -> float:
        """The metric, less the shortfall of off-topic rejection under `min_no_evidence_rate`."""
        value = metric_value(metrics, self.metric)
        floor = self.min_no_evidence_rate
        rejection = metrics.get("no_evidence_rate")
        if floor is not None and rejection is not None and rejection < floor:
            value -= floor - rejection
        return value


def split_queries(queries: list[EvalQuery], share: float, seed: int) -> tuple[list[EvalQuery], list[EvalQuery]]:
    """A deterministic (seeded) split into tuning and held-out queries, answerable and off-topic apart."""
    if not 0.0 < share < 1.0:
        raise ConfigError(f"--holdout-share {share} must lie strictly between 0 and 1")
    rng = random.Random(seed)
    tuning: list[EvalQuery] = []
    held_out: list[EvalQuery] = []
    for answerable in (True, False):
        group = [q for q in queries if q.answerable == answerable]
        rng.shuffle(group)
        cut = round(len(group) * share)
        held_out += group[:cut]
        tuning += group[cut:]
    if not tuning or not held_out:
        raise ConfigError(f"{len(queries)} queries cannot be split into tuning and held-out parts at share {share}")
    return tuning, held_out


@dataclass
class SearchResult:
    space: SearchSpace
    trials: list[Trial]
    best: Trial
    holdout_best: dict[str, Any]
    holdout_default: dict[str, Any]
    parent_run_id: str | None
    runs: RunLogger

    @property
    def override_line(self) -> str:
        return " ".join(self.best.overrides)


def run_search(
    space: SearchSpace,
    base_overrides: list[str],
    tuning: list[EvalQuery],
    held_out: list[EvalQuery],
    trials: int,
    seed: int = 0,
    queries_label: str = "",
    experiment: str | None = None,
) -> SearchResult:
    """Run `trials` Optuna trials on `tuning`, then judge the best and the defaults on `held_out`."""
    import optuna

    if trials < 1:
        raise ConfigError(f"--trials {trials} must be at least 1")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base_cfg = load_config(base_overrides)
    runs = RunLogger.from_config(base_cfg, **({"experiment": experiment} if experiment else {}))
    parent = runs.start(
        f"search {space.name}",
        tags={
            "queries": queries_label,
            "search.space": space.name,
            "search.seed": str(seed),
            "search.metric": space.metric,
        },
    )
    done: list[Trial] = []

    def objective(trial) -> float:
        overrides = space.suggest(trial)
        cfg = load_config([*base_overrides, *overrides])
        evaluation = evaluate(cfg, tuning, build_systems(cfg, baselines=False), label=queries_label)
        metrics = evaluation.report["systems"]["pipeline"]
        run_id = runs.log_evaluation(
            evaluation,
            cfg,
            run_name=f"trial {trial.number}",
            parent_id=parent,
            tags={"search.trial": str(trial.number), "search.overrides": " ".join(overrides)},
        )
        done.append(Trial(overrides, overrides, metrics, run_id))
        return space.objective(metrics)

    try:
        study = optuna.create_study(direction=space.direction, sampler=optuna.samplers.TPESampler(seed=seed))
        study.optimize(objective, n_trials=trials)
        best = done[study.best_trial.number]
        holdout_best = _evaluate_on(held_out, [*base_overrides, *best.overrides], queries_label)
        holdout_default = _evaluate_on(held_out, base_overrides, queries_label)
    except BaseException:
        runs.finish(parent, "FAILED")
        raise
    _log_search(runs, parent, space, best, holdout_best, holdout_default)
    runs.finish(parent)
    return SearchResult(space, done, best, holdout_best, holdout_default, parent, runs)


def _evaluate_on(queries: list[EvalQuery], overrides: list[str], label: str) -> dict[str, Any]:
    cfg = load_config(overrides)
    return evaluate(cfg, queries, build_systems(cfg, baselines=False), label=label).report["systems"]["pipeline"]


def _log_search(runs: RunLogger, parent, space, best: Trial, holdout_best, holdout_default) -> None:
    if parent is None:
        return
    from mlflow import MlflowClient

    from pipelines.tuning.runs import flatten_metrics

    metrics = {f"best.{metric_name(space.metric)}": metric_value(best.metrics, space.metric)}
    metrics.update(flatten_metrics(holdout_best, "holdout.best."))
    metrics.update(flatten_metrics(holdout_default, "holdout.default."))
    runs.log_metrics(parent, metrics)
    MlflowClient(runs.tracking_uri).set_tag(parent, "best.overrides", " ".join(best.overrides))


def format_search(result: SearchResult) -> str:
    metric = result.space.metric
    columns = (metric, "mrr@10", "answer_rate", "no_evidence_rate")
    lines = [f"{len(result.trials)} trials of search={result.space.name}, by {metric} on the tuning queries:"]
    for trial in sorted(result.trials, key=lambda t: -result.space.objective(t.metrics))[:10]:
        cells = "  ".join(f"{c} {metric_value(trial.metrics, c):.3f}" for c in columns)
        lines.append(f"  {cells}  {trial.override_line}")
    lines.append("held-out queries (not used to tune):")
    for name, metrics in (("best", result.holdout_best), ("default", result.holdout_default)):
        cells = "  ".join(f"{c} {metric_value(metrics, c):.3f}" for c in columns)
        lines.append(f"  {name:<8}{cells}")
    lines.append(f"best setting: {result.override_line}")
    return "\n".join(lines)
