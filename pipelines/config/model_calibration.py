"""
A model folder's own calibration: how its similarities are made to mean what the configured thresholds
mean for the packaged model (docs/adapt.md#calibration). Two methods: `packaged_decides` (the base
model decides answer vs no evidence on its own scale, with conf/retrieval's thresholds, while the
model ranks: `embedder.decision_model` is set from the file) and `score_map` (thresholds mapped to
the model's scale, set key by key).

`knowledge adapt` writes `calibration.json` into the model folder; `load_config` applies it when
`embedder.model` names that folder, key by key, unless the key was overridden on the command line
(a user's threshold wins). The file names the model it was fitted for (`model_revision`, the hash
of the folder's adapt.json) and is refused for another; a folder without it, whose index was built
for a decision model (the manifest says so), is refused rather than left to decide on its own scale. `retrieval.calibration` says where the thresholds came from: `auto`
(the default: the model folder's file when it has one), `conf` (conf/retrieval as it is) or the
path of a calibration file; after loading it holds the source in force (`conf` or the file).

Usage example:

```python
cfg = load_config(["embedder.model=/tmp/kb-model"])  # thresholds from /tmp/kb-model/calibration.json
calibration_in_force(cfg)  # {"source": "/tmp/kb-model/calibration.json", "method": "packaged_decides", "overridden": [],
#   "decision_model": "packaged:all-MiniLM-L6-v2", "decision_from": "/tmp/kb-model/calibration.json",
#   "decision_scope": "answer"}
```
"""

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from components.common.embedding_models import PACKAGED_PREFIX, ModelNotFoundError, model_revision, resolve_model
from components.common.model_folder import CALIBRATION_FILE
from components.errors import BadInputError

# The keys a calibration may set: every similarity bar of conf/retrieval.
CALIBRATED_KEYS = (
    "retrieval.reference_threshold",
    "retrieval.evidence_threshold",
    "retrieval.uncovered_evidence_threshold",
    "retrieval.high_relevance",
)
AUTO, CONF = "auto", "conf"
# The calibration methods: the model's own bars mapped from the base model's scale, or the base model
# deciding on its own scale while the model ranks (components/common/decision_scale.py).
SCORE_MAP, PACKAGED_DECIDES = "score_map", "packaged_decides"
METHODS = (PACKAGED_DECIDES, SCORE_MAP)
DECISION_KEY = "embedder.decision_model"
NOT_RECOMMENDED = "not recommended"
# Each calibration file as load_config applied it: /health compares the config with that, not with
# a file changed on disk since.
_applied: dict[str, dict[str, Any]] = {}


class CalibrationError(BadInputError):
    """A calibration file that cannot be read or sets something a calibration may not set."""


def overridden_keys(overrides: list[str] | tuple[str, ...]) -> set[str]:
    """The dotted keys a list of Hydra overrides sets (`++retrieval.top_k=3` -> `retrieval.top_k`)."""
    return {override.split("=", 1)[0].lstrip("+~") for override in overrides if "=" in override}


def calibration_file(cfg: DictConfig) -> Path | None:
    """The calibration file `retrieval.calibration` asks for, None for conf/retrieval as it is."""
    choice = str(cfg.retrieval.calibration)
    if choice == CONF:
        return None
    if choice != AUTO:
        return Path(choice)
    model = str(cfg.embedder.model)
    if model.startswith(PACKAGED_PREFIX):
        return None
    candidate = Path(model) / CALIBRATION_FILE
    return candidate if candidate.is_file() else None


def read_calibration(path: Path) -> dict[str, Any]:
    """The file's content: known method, thresholds of calibrated keys with numbers in [0, 1], decision model named."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CalibrationError(f"retrieval.calibration: cannot read {path}: {exc}") from exc
    thresholds = data.get("thresholds") if isinstance(data, dict) else None
    if not isinstance(thresholds, dict):
        raise CalibrationError(f"retrieval.calibration: {path} has no `thresholds` object")
    for key, value in thresholds.items():
        if key not in CALIBRATED_KEYS:
            raise CalibrationError(
                f"retrieval.calibration: {path} sets {key}; a calibration sets {', '.join(CALIBRATED_KEYS)}"
            )
        # JSON's true is a bool, which Python counts as the int 1: a threshold must be a real number.
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise CalibrationError(f"retrieval.calibration: {path} sets {key}={value!r}, not a number in [0, 1]")
    if data.get("method") not in METHODS:
        raise CalibrationError(
            f"retrieval.calibration: {path} has method {data.get('method')!r}; known methods: {', '.join(METHODS)}"
        )
    decision = data.get("decision_model")
    if data.get("method") == PACKAGED_DECIDES and not (isinstance(decision, str) and decision.strip()):
        raise CalibrationError(f"retrieval.calibration: {path} says {PACKAGED_DECIDES} but names no decision_model")
    if not isinstance(data.get("model_revision"), str):
        raise CalibrationError(
            f"retrieval.calibration: {path} names no model_revision (the model it was fitted for): "
            "run `knowledge adapt` again to write it anew"
        )
    return data


def check_fitted_for(data: dict[str, Any], path: Path, model: str) -> None:
    """A calibration fitted for one model must not set another's thresholds."""
    revision = model_revision(model)
    if data["model_revision"] != revision:
        raise CalibrationError(
            f"retrieval.calibration: {path} was fitted for the model of revision {data['model_revision'] or 'none'}, "
            f"not for {model} (revision {revision or 'none'}): run `knowledge adapt` for this model, "
            "or retrieval.calibration=conf"
        )


def apply_calibration(cfg: DictConfig, overrides: list[str] | tuple[str, ...]) -> None:
    """Set the calibration's thresholds (those not given in `overrides`) and record its source in the config."""
    given = overridden_keys(overrides)
    path = calibration_file(cfg)
    if path is None:
        if str(cfg.retrieval.calibration) == AUTO and DECISION_KEY not in given:
            check_index_needs_no_decision_model(cfg)
        OmegaConf.update(cfg, "retrieval.calibration", CONF)
        check_decision_model(cfg, DECISION_KEY)
        return
    data = read_calibration(path)
    check_fitted_for(data, path, str(cfg.embedder.model))
    for key, value in data.get("thresholds", {}).items():
        if key not in given:
            OmegaConf.update(cfg, key, float(value))
    # The base model decides on its own scale, with conf/retrieval's bars, unless one was given.
    from_file = data.get("method") == PACKAGED_DECIDES and DECISION_KEY not in given
    if from_file and cfg.embedder.decision_model is None:
        OmegaConf.update(cfg, DECISION_KEY, data["decision_model"])
    OmegaConf.update(cfg, "retrieval.calibration", str(path))
    check_decision_model(cfg, f"{path}'s decision_model" if from_file else DECISION_KEY)
    _applied[str(path)] = data


def check_decision_model(cfg: DictConfig, named_by: str) -> None:
    """The decision model must exist, and a missing one is named by the key (or file) that set it."""
    decision = cfg.embedder.decision_model
    if decision is None:
        return
    try:
        resolve_model(str(decision))
    except ModelNotFoundError as exc:
        raise CalibrationError(f"{named_by}: {str(exc).removeprefix('embedder.model: ')}") from exc


def check_index_needs_no_decision_model(cfg: DictConfig) -> None:
    """
    A model folder without calibration.json would decide answer vs no evidence on its own scale;
    refuse it when the index beside it was built for a decision model (an unfinished adapt, a lost file).
    """
    from pipelines.config.manifest import manifest_decision_model

    model = str(cfg.embedder.model)
    if model.startswith(PACKAGED_PREFIX):
        return
    decision = manifest_decision_model(cfg)
    if decision is not None:
        raise CalibrationError(
            f"model folder {model} has no {CALIBRATION_FILE}, but the index was built for {decision} to decide "
            f"(its manifest says so): run `knowledge adapt` again to finish the folder, "
            f"or give embedder.decision_model={decision}"
        )


def adapt_verdict(cfg: DictConfig) -> str | None:
    """The verdict line when the calibration in force records that adapt did not recommend its model."""
    try:
        data = _calibration_data(cfg)
    except CalibrationError:  # changed since the config was loaded: calibration_in_force says so
        return None
    verdict = data.get("verdict") if data else None
    if isinstance(verdict, dict) and verdict.get("recommended") is False:
        return f"{NOT_RECOMMENDED}: {verdict.get('reason', 'no reason recorded')}"
    return None


def _calibration_data(cfg: DictConfig) -> dict[str, Any] | None:
    """The calibration in force as load_config applied it (read again for a config loaded elsewhere)."""
    source = str(cfg.retrieval.calibration)
    if source in (CONF, AUTO):
        return None
    if source not in _applied:
        _applied[source] = read_calibration(Path(source))
    return _applied[source]


def calibration_in_force(cfg: DictConfig) -> dict[str, Any]:
    """
    Where the thresholds in force came from, for `/health` and the trace: the source, the
    calibration's method, the calibrated keys whose value is not the file's as it was applied (a
    user override), and adapt's verdict when it did not recommend the model.
    """
    source = str(cfg.retrieval.calibration)
    if source in (CONF, AUTO):
        return {"source": CONF, "method": None, "overridden": [], **_decision_in_force(cfg, {})}
    try:
        data = _calibration_data(cfg)
    except CalibrationError as exc:  # the file changed since the config was loaded: say so, do not fail
        return {"source": source, "method": None, "overridden": [], "detail": str(exc)}
    overridden = [key for key, value in data["thresholds"].items() if OmegaConf.select(cfg, key) != float(value)]
    shown = {"source": source, "method": data.get("method"), "overridden": overridden, **_decision_in_force(cfg, data)}
    verdict = adapt_verdict(cfg)
    return shown if verdict is None else {**shown, "verdict": verdict}


def _decision_in_force(cfg: DictConfig, data: dict[str, Any]) -> dict[str, Any]:
    """The model that decides when it is not the ranking model, where that came from and what it decides (else nothing)."""
    decision = cfg.embedder.decision_model
    if decision is None:
        return {}
    from_file = data.get("method") == PACKAGED_DECIDES and data.get("decision_model") == decision
    return {
        "decision_model": decision,
        "decision_from": str(cfg.retrieval.calibration) if from_file else DECISION_KEY,
        "decision_scope": str(cfg.embedder.decision_scope),
    }
