"""
A component built without config behaves as the configured pipeline does: each `__init__` default
equals the value the default config gives the parameter through the lookup and indexing YAML
(`${section.key}`), or the parameter has no default.
"""

import dataclasses
import importlib
import inspect
import re
from typing import Any

import pytest
import yaml

from components.stores.knowledge_store import KnowledgeStore
from pipelines.config.pipeline_files import PIPELINE_NAMES, pipeline_path
from pipelines.config.settings import knowledge_store, load_config
from pipelines.serialized import derived_values, resolve_pipeline_data

# One config value: `${retrieval.top_k}`; not `${derived.*}` (computed per call) nor a resolver (`${milvus_secret:token}`).
CONF_VALUE = re.compile(r"^\$\{(?!derived\.)[A-Za-z_][\w.]*\}$")


def _components(cfg) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(pipeline, component name, spec as written, spec resolved) of every component, nested ones included."""
    found = []
    for name in PIPELINE_NAMES:
        template = yaml.safe_load(pipeline_path(cfg, name).read_text(encoding="utf-8"))
        resolved = resolve_pipeline_data(template, cfg, derived_values(cfg, index_fingerprint=""))
        for component, spec in template["components"].items():
            found += _with_nested(name, component, spec, resolved["components"][component])
    return found


def _with_nested(pipeline: str, name: str, spec: dict, resolved: dict) -> list:
    found = [(pipeline, name, spec, resolved)]
    for key, value in (spec.get("init_parameters") or {}).items():
        if isinstance(value, dict) and "type" in value:
            found += _with_nested(pipeline, f"{name}.{key}", value, resolved["init_parameters"][key])
    return found


CFG = load_config()
COMPONENTS = _components(CFG)


def _class(spec: dict) -> type:
    module, _, name = spec["type"].rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize(
    ("written", "resolved"),
    [(spec, resolved) for _, _, spec, resolved in COMPONENTS],
    ids=[f"{pipeline}:{name}" for pipeline, name, _, _ in COMPONENTS],
)
def test_component_defaults_equal_the_config_the_pipeline_passes(written, resolved):
    cls = _class(written)
    signature = inspect.signature(cls.__init__).parameters
    differing = {}
    for key, value in written.get("init_parameters", {}).items():
        default = signature[key].default
        if isinstance(value, str) and CONF_VALUE.match(value) and default is not inspect.Parameter.empty:
            configured = resolved["init_parameters"][key]
            if default != configured:
                differing[key] = (default, configured)
    assert differing == {}, f"{cls.__name__}: (default, config) of each parameter that differs"


def test_every_pipeline_component_is_checked():
    assert {name for pipeline, name, _, _ in COMPONENTS if pipeline == "lookup"} >= {
        "query_transformer",
        "l0_hints",
        "query_embedder",
        "retriever",
        "sidecar",
        "reranker",
        "deduper",
        "context_packer",
        "assembler",
        "trace_writer",
    }
    assert {name for pipeline, name, _, _ in COMPONENTS if pipeline == "indexing"} >= {
        "reader",
        "planner",
        "chunker",
        "embedder",
        "writer",
        "l0_writer",
    }


def test_store_defaults_equal_the_configured_store():
    """The `${knowledge_store:}` of the YAMLs: each field default equals the default config's `milvus.*` value."""
    configured = knowledge_store(CFG)
    differing = {
        field.name: (field.default, getattr(configured, field.name))
        for field in dataclasses.fields(KnowledgeStore)
        if field.default is not dataclasses.MISSING
        and field.name != "auth"
        and field.default != getattr(configured, field.name)
    }
    assert differing == {}


def test_l0_match_defaults_equal_the_configured_l0():
    """`match`, which `L0HintExtractor` calls, defaults each parameter to the default config's `l0.*` value."""
    from components.lookup.l0_matching import match

    parameters = inspect.signature(match).parameters
    differing = {
        name: (parameter.default, CFG.l0[name])
        for name, parameter in parameters.items()
        if name in CFG.l0 and parameter.default != CFG.l0[name]
    }
    assert set(parameters) - {"index", "query"} <= set(CFG.l0)
    assert differing == {}
