"""
A model folder's own calibration: how its similarities are made to mean what the configured thresholds
mean for the packaged model (docs/adapt.md#calibration). Two methods: `packaged_decides` (the base
model decides answer vs no evidence on its own scale, with conf/retrieval's thresholds, while the
model ranks: `embedder.decision_model` is set from the file) and `score_map` (thresholds mapped to
the model's scale, set key by key).

`knowledge adapt` writes `calibration.json` into the model folder; `load_config` applies it when
`embedder.model` names that folder, key by key, unless the key was overridden on the command line
(a user's threshold wins). `retrieval.calibration` says where the thresholds came from: `auto`
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

from components.common.embedding_models import PACKAGED_PREFIX
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
DECISION_KEY = "embedder.decision_model"


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
    """The file's content, its thresholds checked to be calibrated keys with numbers in [0, 1]."""
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
        if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise CalibrationError(f"retrieval.calibration: {path} sets {key}={value!r}, not a number in [0, 1]")
    decision = data.get("decision_model")
    if data.get("method") == PACKAGED_DECIDES and not (isinstance(decision, str) and decision.strip()):
        raise CalibrationError(f"retrieval.calibration: {path} says {PACKAGED_DECIDES} but names no decision_model")
    return data


def apply_calibration(cfg: DictConfig, overrides: list[str] | tuple[str, ...]) -> None:
    """Set the calibration's thresholds (those not given in `overrides`) and record its source in the config."""
    path = calibration_file(cfg)
    if path is None:
        OmegaConf.update(cfg, "retrieval.calibration", CONF)
        return
    given = overridden_keys(overrides)
    data = read_calibration(path)
    for key, value in data.get("thresholds", {}).items():
        if key not in given:
            OmegaConf.update(cfg, key, float(value))
    # The base model decides on its own scale, with conf/retrieval's bars, unless one was given.
    if data.get("method") == PACKAGED_DECIDES and DECISION_KEY not in given and cfg.embedder.decision_model is None:
        OmegaConf.update(cfg, DECISION_KEY, data["decision_model"])
    OmegaConf.update(cfg, "retrieval.calibration", str(path))


def calibration_in_force(cfg: DictConfig) -> dict[str, Any]:
    """
    Where the thresholds in force came from, for `/health` and the trace: the source, the
    calibration's method, and the calibrated keys whose value is not the file's (a user override).
    """
    source = str(cfg.retrieval.calibration)
    if source in (CONF, AUTO):
        return {"source": CONF, "method": None, "overridden": [], **_decision_in_force(cfg, {})}
    try:
        data = read_calibration(Path(source))
    except CalibrationError as exc:  # the file changed since the config was loaded: say so, do not fail
        return {"source": source, "method": None, "overridden": [], "detail": str(exc)}
    overridden = [key for key, value in data["thresholds"].items() if OmegaConf.select(cfg, key) != float(value)]
    return {"source": source, "method": data.get("method"), "overridden": overridden, **_decision_in_force(cfg, data)}


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
