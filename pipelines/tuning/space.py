"""
What a search explores and on which queries its best is judged: the space of one
`conf/search/*.yaml` (metric, direction, a distribution per config key, constraints) and the seeded
split of each tuning set into its tuning and held-out parts.
"""

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pipelines.config.settings import CONF_DIR, ConfigError
from pipelines.evaluation.metrics import EvalQuery
from pipelines.tuning.guards import QuerySet
from pipelines.tuning.ranking import LOWER_IS_BETTER, RANKABLE
from pipelines.tuning.sweep import affects_index, metric_value

SEARCH_GROUP = "search"


@dataclass
class SearchSpace:
    """One `conf/search/*.yaml`: what to optimise, the distribution of each config key, the constraints."""

    name: str
    metric: str
    direction: str
    space: dict[str, dict[str, Any]]
    constraints: list[str] = field(default_factory=list)
    origin: str = ""
    # Metrics no query set may lose more of than guard.tolerance below the current settings (pipelines/tuning/guard_fit.py).
    relative: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, name: str, config_dir: Path | None = None) -> "SearchSpace":
        folder = (config_dir or CONF_DIR) / SEARCH_GROUP
        path = Path(name) if name.endswith((".yaml", ".yml")) else folder / f"{name}.yaml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
            raise ConfigError(f"search={name}: no {path.name} in {path.parent}; known: {known}")
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        if "min_no_evidence_rate" in data:
            raise ConfigError(
                f"search={name}: min_no_evidence_rate is gone; declare constraints: [no_evidence_rate>=X]"
            )
        space = cls(
            name=path.stem,
            metric=str(data.get("metric", "hit@1")),
            direction=str(data.get("direction", "maximize")),
            space=dict(data.get("space") or {}),
            constraints=[str(c) for c in data.get("constraints") or []],
            relative=[str(m) for m in data.get("relative") or []],
            origin=str(path.relative_to(CONF_DIR.parent) if path.is_relative_to(CONF_DIR.parent) else path),
        )
        space.check()
        return space

    def check(self) -> None:
        if self.direction not in ("maximize", "minimize"):
            raise ConfigError(f"search={self.name}: direction must be maximize or minimize, not {self.direction!r}")
        if not self.space:
            raise ConfigError(f"search={self.name}: the space is empty")
        for metric in self.relative:
            if metric not in RANKABLE or metric in LOWER_IS_BETTER:
                raise ConfigError(
                    f"search={self.name}: relative: {metric!r} is not a metric a setting may lose only so much of; "
                    f"give some of {', '.join(m for m in RANKABLE if m not in LOWER_IS_BETTER)}"
                )
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
        return metric_value(metrics, self.metric)

    def better_first(self, value: float) -> float:
        """A sort key that puts the better objective first."""
        return -value if self.direction == "maximize" else value


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


def split_sets(sets: list[QuerySet], share: float, seed: int) -> tuple[list[QuerySet], list[QuerySet]]:
    """Each tuning set split into its tuning part and its held-out part (same name, role `held-out`)."""
    tuning, held_out = [], []
    for query_set in sets:
        kept, out = split_queries(query_set.queries, share, seed)
        tuning.append(QuerySet(query_set.name, query_set.path, kept, "tuning"))
        held_out.append(QuerySet(query_set.name, query_set.path, out, "held-out"))
    return tuning, held_out
