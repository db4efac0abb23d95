"""
Evaluations a tuning command already ran, kept for the rest of the command. A search measures the
current settings first (the guard and the relative bounds are theirs), then runs them again as its
first trial and judges them on the held-out sets: the same config on the same sets gives the same
answers, so each is evaluated once.

    measured = MeasuredSets()
    evaluation, per_set = measured.evaluate(cfg, sets, lambda: build_systems(cfg, baselines=False))
    measured.evaluate(load_config(same_overrides), sets, ...)    # the same evaluation, not run again
"""

import json
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipelines.evaluation.run import Evaluation
from pipelines.tuning.guards import QuerySet, evaluate_sets


def _config_key(cfg: DictConfig) -> str:
    return json.dumps(OmegaConf.to_container(cfg, resolve=True), sort_keys=True, default=str)


def _sets_key(sets: list[QuerySet]) -> tuple:
    return tuple(
        (s.name, s.path, s.role, tuple((q.query, tuple(sorted(q.relevant)), q.kind, q.id) for q in s.queries))
        for s in sets
    )


class MeasuredSets:
    """The evaluations run so far, by resolved config and query sets (with their roles and queries)."""

    def __init__(self) -> None:
        self._done: dict[tuple, tuple[Evaluation, dict[str, dict[str, Any]]]] = {}

    def evaluate(
        self, cfg: DictConfig, sets: list[QuerySet], systems: Callable[[], list[Any]]
    ) -> tuple[Evaluation, dict[str, dict[str, Any]]]:
        """`evaluate_sets` of `sets` at `cfg`, run only the first time; `systems` builds them when it runs."""
        key = (_config_key(cfg), _sets_key(sets))
        if key not in self._done:
            self._done[key] = evaluate_sets(cfg, sets, systems())
        return self._done[key]
