"""
The pipeline YAML files as written: where `pipeline.<name>` points, their data with `${...}`
unresolved, and the config key that wires a component's init parameter. Nothing here imports
Haystack, so a command that only reads traces names a bad `trace.*` value by the key the lookup
pipeline wires, without building the pipeline.

    wired_key(cfg, "lookup", "trace_writer", "retry_interval")    # 'trace.retry_interval_s'
"""

import re
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from components.errors import first_line
from pipelines.config.settings import ConfigError

YAML_DIR = Path(__file__).resolve().parent.parent / "yaml"
PIPELINE_NAMES = ("lookup", "indexing")


def pipeline_path(cfg: DictConfig, name: str) -> Path:
    """The YAML file `cfg.pipeline.<name>` names: relative to pipelines/yaml/, or absolute."""
    if name not in PIPELINE_NAMES:
        raise ValueError(f"unknown pipeline {name!r}: one of {', '.join(PIPELINE_NAMES)}")
    configured = Path(cfg.pipeline[name])
    return configured if configured.is_absolute() else YAML_DIR / configured


def pipeline_template(cfg: DictConfig, name: str) -> dict[str, Any]:
    """
    The unresolved data of pipeline `name` of `cfg`, its `${...}` as written.

    :raises ConfigError: The file is missing or no YAML mapping.
    """
    path = pipeline_path(cfg, name)
    try:
        template = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(
            f"pipeline.{name}={cfg.pipeline[name]}: cannot read {path}: {first_line(exc, from_cause=True)}"
        ) from exc
    if not isinstance(template, dict) or not isinstance(template.get("components"), dict):
        raise ConfigError(f"pipeline.{name}={cfg.pipeline[name]}: {path} is not a pipeline (no components mapping)")
    return template


def _init_parameters(cfg: DictConfig, name: str, component: str) -> dict[str, Any]:
    spec = pipeline_template(cfg, name)["components"].get(component) or {}
    return spec.get("init_parameters") or {}


def _wired(value: Any) -> str | None:
    """The config key a written init value is (`${key}`), unless it is computed per call (`derived.`)."""
    wired = re.fullmatch(r"\$\{([\w.]+)\}", str(value))
    return wired.group(1) if wired and not wired.group(1).startswith("derived.") else None


def wired_key(cfg: DictConfig, name: str, component: str, parameter: str) -> str | None:
    """The config key that pipeline `name` gives `component`'s init `parameter` (`${key}`), if it gives one."""
    return _wired(_init_parameters(cfg, name, component).get(parameter, ""))


def wired_values(cfg: DictConfig, name: str, component: str, parameters: tuple[str, ...]) -> dict[str, Any]:
    """`component`'s init `parameters` as pipeline `name` gives them, each `${key}` read from `cfg`."""
    given = _init_parameters(cfg, name, component)
    keys = {parameter: _wired(given.get(parameter, "")) for parameter in parameters}
    return {p: OmegaConf.select(cfg, key) if key else given.get(p) for p, key in keys.items()}
