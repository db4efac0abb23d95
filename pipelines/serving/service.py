"""
The one warmed `LookupService` of a server process, built from the overrides the serve command
passes in `KNOWLEDGE_SERVE_OVERRIDES` (a JSON list of Hydra overrides).
"""

import json
import os
import threading
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from pipelines.config.settings import load_config

if TYPE_CHECKING:  # imported on first use: a worker keeps torch out before Haystack loads (worker.py)
    from pipelines.lookup import LookupService

OVERRIDES_ENV = "KNOWLEDGE_SERVE_OVERRIDES"

_lock = threading.Lock()
_services: dict[str, "LookupService"] = {}


def overrides_from_env() -> list[str]:
    """The Hydra overrides of this server process (none: the default config)."""
    raw = os.environ.get(OVERRIDES_ENV, "").strip()
    if not raw:
        return []
    overrides = json.loads(raw)
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ValueError(f"{OVERRIDES_ENV} must hold a JSON list of key=value strings")
    return overrides


def served_config() -> DictConfig:
    return load_config(overrides_from_env())


def shared_service(cfg: DictConfig | None = None) -> "LookupService":
    """
    The process's LookupService for the served config, built and warmed on first use. Milvus Lite
    lets one process open a db file, so every endpoint of the process (REST, MCP, health) shares it.
    """
    from pipelines.lookup import LookupService

    key = os.environ.get(OVERRIDES_ENV, "")
    with _lock:
        service = _services.get(key)
        if service is None:
            service = LookupService(cfg if cfg is not None else served_config())
            service.warm_up()
            _services[key] = service
    return service
