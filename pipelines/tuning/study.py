"""
The Optuna study of a search: its storage (`paths.state_dir/optuna.db`), the constrained TPE
sampler, the current settings enqueued as a trial, infeasible trials stored pruned (so optuna-dashboard's
"Best Trial", read from the best completed trial, is a feasible one), a line per finished trial and the
parameter importances.
"""

import logging
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from components.errors import KnowledgeFailure, first_line
from pipelines.config.settings import ConfigError
from pipelines.tuning.guards import Constraint
from pipelines.tuning.space import SearchSpace
from pipelines.tuning.sweep import metric_value

logger = logging.getLogger(__name__)

STUDY_FILE = "optuna.db"
IMPORTANCES_ARTIFACT = "param_importances.json"
CURRENT_ATTR = "current_settings"


# SQLite's result codes of a file another connection holds a lock on (it is healthy, only busy).
_BUSY_CODES = ("SQLITE_BUSY", "SQLITE_LOCKED")


class StudyFileBusyError(KnowledgeFailure):
    """Another process holds a write lock on the study file: it is busy, not damaged."""


def study_storage(state_dir: str, study_file: str | None = None) -> str:
    """The Optuna storage URL: `study_file`, else `optuna.db` in the state dir."""
    path = Path(study_file).expanduser() if study_file else Path(state_dir) / STUDY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


def check_study_file(storage: str) -> None:
    """Fail now on a damaged or busy study file, with what to do, before any set is measured."""
    _study_summaries(storage)


def _study_summaries(storage: str) -> list[Any]:
    """The studies of the storage; a busy or damaged study file is named with what to do, not as a bare sqlite error."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return optuna.get_all_study_summaries(storage)
    except SQLAlchemyError as exc:
        path = storage.removeprefix("sqlite:///")
        if _is_busy(exc):
            holders = _holders(path)
            opened = f" ({', '.join(holders)} has it open: another search?)" if holders else ""
            raise StudyFileBusyError(
                f"the study file {path} is busy: another process holds a lock on it{opened}; wait for it to finish, "
                "or give this search a study file of its own (--study-file FILE)"
            ) from exc
        raise ConfigError(
            f"the study file {path} is damaged ({first_line(exc)}): move it away to start again (its studies are "
            "lost), or give another --study-file"
        ) from exc


def _is_busy(exc: BaseException) -> bool:
    """A locked (healthy) database, by SQLite's own result code, not a file that is not one."""
    return getattr(getattr(exc, "orig", None), "sqlite_errorname", None) in _BUSY_CODES


def _holders(path: str) -> list[str]:
    """The other processes that have the file open (from /proc, where there is one), as `pid N (command)`."""
    target = os.path.realpath(path)
    found = []
    for pid in _other_pids():
        try:
            opened = any(os.path.realpath(f"/proc/{pid}/fd/{fd}") == target for fd in os.listdir(f"/proc/{pid}/fd"))
            if opened:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"pid {pid} ({' '.join(command.split())[:120]})")  # one line, however it was started
        except OSError:  # gone meanwhile, or not ours to look at
            continue
    return found


def _other_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != os.getpid()]
    except OSError:
        return []


def open_study(storage: str, space: SearchSpace, study_name: str | None, resume: bool, seed: int, constraints):
    """A new study, or with `resume` the named (or latest) study of this space; Optuna's constrained TPE either way."""
    import warnings

    import optuna

    # constraints_func is marked experimental in Optuna 4; it is the documented way to constrain TPE.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # The current settings are a trial even when they lie off the space's grid (pipelines/tuning/search.py::_enqueue_current).
    warnings.filterwarnings("ignore", message="Fixed parameter .* is out of range")

    names = {s.study_name: s for s in _study_summaries(storage)}
    study_name = _study_name(names, storage, space, study_name, resume)
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


def _study_name(names: dict[str, Any], storage: str, space: SearchSpace, study_name: str | None, resume: bool) -> str:
    """
    The study to open: with `resume` the named one, or the latest of this space, which must exist;
    without it the given name, which must not exist yet, or a new one.
    """
    if resume and study_name is None:
        study_name = _latest_study(names, storage, space)
    if resume and study_name not in names:
        raise ConfigError(
            f"--resume: no study {study_name!r} in {storage}; known: {', '.join(sorted(names)) or 'none'}"
        )
    if not resume and study_name in names:
        raise ConfigError(f"study {study_name!r} exists in {storage}: --resume continues it, or give another --study")
    return study_name or f"{space.name}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:4]}"


def _latest_study(names: dict[str, Any], storage: str, space: SearchSpace) -> str:
    mine = [s for s in names.values() if s.user_attrs.get("space") == space.name]
    if not mine:
        raise ConfigError(f"--resume: no study of search={space.name} in {storage}; start one without --resume")
    return max(mine, key=lambda s: s.datetime_start or datetime.min).study_name


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


def finish_trial(trial, value: float, violations: list[float]) -> float:
    """
    The trial's value; an infeasible trial is reported and pruned instead of completed, so that
    whatever reads the study's best completed trial (optuna-dashboard's "Best Trial") sees a feasible one.
    """
    import optuna

    if any(v > 0 for v in violations):
        trial.report(value, step=0)
        trial.set_user_attr("infeasible", True)
        raise optuna.TrialPruned("breaks a constraint")
    return value


def evaluated_state(frozen) -> bool:
    import optuna

    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return frozen.state in states and "overrides" in frozen.user_attrs


def evaluated_settings(study) -> dict[tuple, tuple[int, dict[str, Any]]]:
    """The study's evaluated trials (a resumed study's too): their number and attributes by their overrides."""
    return {
        tuple(t.user_attrs["overrides"]): (t.number, t.user_attrs)
        for t in study.trials
        if evaluated_state(t) and "repeat_of" not in t.user_attrs
    }


def enqueue_current(study, space: SearchSpace, cfg) -> None:
    """The settings in force are always a trial (the first of a new study): the baseline every trial is judged against."""
    from omegaconf import OmegaConf

    params = {key: OmegaConf.select(cfg, key) for key in space.space}
    if any("choices" in spec and params[key] not in spec["choices"] for key, spec in space.space.items()):
        return  # Optuna cannot draw a choice outside the list: the defaults are then scored apart (_judge)
    if not _tried(study, params):
        study.enqueue_trial(params, user_attrs={CURRENT_ATTR: True})


def _tried(study, params: dict[str, Any]) -> bool:
    """
    Whether a trial of the study has these settings, evaluated or waiting. Optuna's own check
    (`skip_if_exists`) counts a failed trial too, so the current settings' trial interrupted by
    Ctrl+C would never run again in the resumed study.
    """
    import optuna

    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.WAITING)
    return any(
        frozen.system_attrs.get("fixed_params", frozen.params) == params
        for frozen in study.get_trials(deepcopy=False, states=states)
    )


class SearchInterruptedError(KnowledgeFailure):
    """Ctrl+C during a search: the trials that finished are in the study, which a resumed search continues."""

    exit_code = 130  # as for any command stopped by SIGINT


def interrupted_error(study, storage: str, finished: int, asked: int) -> SearchInterruptedError:
    return SearchInterruptedError(
        f"search interrupted: {finished} of {asked} trials finished (study {study.study_name} in "
        f"{storage.removeprefix('sqlite:///')}); resume it with --study {study.study_name} --resume"
    )


class QuietRaisedTrialFailures(logging.Filter):
    """
    Optuna logs a trial whose objective raised, with the traceback (and then its value, None),
    before it raises the error again; the command reports that error in one line, or for Ctrl+C
    how to resume. A trial that failed without raising (a NaN value) is still logged.
    """

    def __init__(self) -> None:
        super().__init__()
        self.raised: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        trial, _, rest = record.getMessage().partition(" failed with ")
        if record.exc_info:
            self.raised.add(trial)
            return False
        if rest.startswith("value") and trial in self.raised:
            self.raised.discard(trial)
            return False
        return True


def quiet_raised_trial_failures() -> None:
    """Install the filter on Optuna's optimize logger once."""
    noisy = logging.getLogger("optuna.study._optimize")
    if not any(isinstance(f, QuietRaisedTrialFailures) for f in noisy.filters):
        noisy.addFilter(QuietRaisedTrialFailures())


def progress_printer(space: SearchSpace, constraints: list[Constraint], total: int, say):
    """One line per finished trial, as the search goes (a trial takes seconds to minutes)."""
    count = {"done": 0}

    def callback(study, frozen) -> None:
        count["done"] += 1
        attrs = frozen.user_attrs
        if "overrides" not in attrs:
            return
        value = format_value(metric_value(attrs["metrics"], space.metric))
        state = "infeasible" if attrs.get("infeasible") else "feasible"
        repeat = f" (repeats trial {attrs['repeat_of']}, not re-run)" if "repeat_of" in attrs else ""
        current = " (current settings)" if attrs.get(CURRENT_ATTR) else ""
        say(
            f"trial {frozen.number} ({count['done']}/{total}): {space.metric} {value}, {state}{current}{repeat}: "
            + " ".join(attrs["overrides"])
        )

    return callback


def param_importances(study) -> dict[str, Any] | None:
    """Optuna's parameter importances (fANOVA) over the study's trials; None with too few trials to tell."""
    import optuna

    try:
        importances = optuna.importance.get_param_importances(evaluated_study(study))
    except (ValueError, RuntimeError) as exc:  # fewer than two completed trials, or no variance to explain
        logger.info("No parameter importances for study %s: %s", study.study_name, exc)
        return None
    return {"study": study.study_name, "evaluator": "fanova", "importances": dict(importances)}


def evaluated_study(study):
    """
    The study's evaluated trials as completed ones in an in-memory study: infeasible trials are stored
    pruned (with their value as step 0), and what a parameter does to the metric counts them too.
    """
    import optuna

    copy = optuna.create_study(directions=study.directions)
    for frozen in study.trials:
        value = frozen.value if frozen.value is not None else frozen.intermediate_values.get(0)
        if value is not None and evaluated_state(frozen):
            copy.add_trial(
                optuna.trial.create_trial(params=frozen.params, distributions=frozen.distributions, value=value)
            )
    return copy


def format_value(value: float | None) -> str:
    """A metric as tables print it; a missing one as `-`."""
    return "-" if value is None or value == float("-inf") else f"{value:.3f}"
