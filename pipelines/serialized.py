"""
The YAML pipelines of pipelines/yaml/, the wiring that runs: one is loaded resolved against a
composed Hydra config (`load_pipeline`), or rendered as a concrete YAML for hayhooks
`deploy-yaml` (`render_pipeline_yaml`, and the command below).

    python -m pipelines.serialized --output DIR [overrides]

How a file is resolved, and the ablations as config keys: docs/pipelines.md.
"""

import argparse
import dataclasses
import logging
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from haystack import Pipeline
from haystack.core.errors import DeserializationError, PipelineError
from haystack.core.serialization import DeserializationCallbacks
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from components.errors import ParameterError, first_line
from pipelines.config.pipeline_files import PIPELINE_NAMES, pipeline_path, pipeline_template, wired_key
from pipelines.config.settings import SECRET_KEYS, ConfigError, knowledge_store, load_config

logger = logging.getLogger(__name__)

# Pipeline.from_dict imports component classes only from these packages (and Haystack's own).
ALLOWED_MODULES = ["components", "milvus_haystack", "haystack_integrations"]
RENDERED_FILE_NAMES = {"lookup": "lookup_knowledge.yml", "indexing": "indexing.yml"}
# Haystack ignores these top-level keys; hayhooks `deploy-yaml` reads them.
HAYHOOKS_IO_KEYS = ("inputs", "outputs")
# The pipeline data sits under this key of the resolution root, beside the config and `derived`.
_PIPELINE_KEY = "__pipeline__"


# `${knowledge_store:}` in a pipeline file: the config's `KnowledgeStore` (`settings.knowledge_store`),
# the one place the `milvus.*` keys become the store. A credential empty in the config is its
# environment variable (`MILVUS_TOKEN`, ...), serialized by name only; one set in the config becomes
# a token Secret after resolution (`_config_secrets`), which Haystack never writes to a file. Either
# way the value stays out of the resolved data, logs and traces. `${milvus_secret:token}` is one
# credential alone, for a file that spells the store out.
_CONFIG_SECRET = "config_secret"


def _milvus_secret(name: str, *, _root_: DictConfig) -> dict[str, Any]:
    from components.stores.milvus_auth import env_secret

    if OmegaConf.select(_root_, f"milvus.{name}"):
        return {"type": _CONFIG_SECRET, "key": f"milvus.{name}"}
    return env_secret(name).to_dict()


def _knowledge_store(*, _root_: DictConfig) -> dict[str, Any]:
    from components.stores.milvus_auth import CREDENTIAL_ENV

    store = knowledge_store(_root_)
    unresolved = dataclasses.replace(store.auth, **dict.fromkeys(CREDENTIAL_ENV))
    data = dataclasses.replace(store, auth=unresolved).to_dict()
    data["init_parameters"]["auth"]["init_parameters"].update(
        {name: _milvus_secret(name, _root_=_root_) for name in CREDENTIAL_ENV}
    )
    return data


OmegaConf.register_new_resolver("milvus_secret", _milvus_secret, replace=True)
OmegaConf.register_new_resolver("knowledge_store", _knowledge_store, replace=True)


def _config_secrets(data: dict[str, Any], cfg: DictConfig) -> dict[str, Any]:
    """
    Replace the markers of credentials set in the config with token Secrets of their values, in
    the init parameters of each component and of the values they hold (`auth: {type: MilvusAuth,
    init_parameters: {token: ...}}`).
    """
    from haystack.utils import Secret

    def replace(params: dict[str, Any]) -> None:
        for key, value in params.items():
            if not isinstance(value, dict):
                continue
            if value.get("type") == _CONFIG_SECRET:
                params[key] = Secret.from_token(OmegaConf.select(cfg, value["key"]))
            elif isinstance(value.get("init_parameters"), dict):
                replace(value["init_parameters"])

    for spec in data["components"].values():
        replace(spec.get("init_parameters") or {})
    return data


def derived_values(cfg: DictConfig, **overrides: Any) -> dict[str, Any]:
    """
    Values the code computes for a call, reachable in the YAML as `${derived.<key>}`: the index
    fingerprint, whether the embedder shows a progress bar (`progress_bar=True` overrides) and
    adapt's verdict when it did not recommend the model (None otherwise).
    """
    from pipelines.config.manifest import index_fingerprint
    from pipelines.config.model_calibration import adapt_verdict

    derived = {"index_fingerprint": index_fingerprint(cfg), "progress_bar": False, "model_verdict": adapt_verdict(cfg)}
    return {**derived, **overrides}


def resolve_pipeline_data(
    data: Mapping[str, Any], cfg: DictConfig, derived: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """
    The pipeline data with every `${...}` resolved: the data is attached beside the config (and
    `derived`) under one root, so `${retrieval.top_k}` means the config's key.
    """
    root = OmegaConf.create(
        {
            # Unresolved, so that the config resolves once, here: a value escaped to stay literal
            # (a `--kb` path holding `${`) is unescaped once, not parsed a second time.
            **OmegaConf.to_container(cfg, resolve=False),
            "derived": dict(derived or {}),
            _PIPELINE_KEY: dict(data),
        }
    )
    return OmegaConf.to_container(root[_PIPELINE_KEY], resolve=True)  # type: ignore[return-value]


def without_components(data: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """
    The pipeline data without the named components and every connection to or from them.

    For side branches only (the sidecar, the trace writer): what a left-out component sent may
    only have fed optional inputs; `load_pipeline` checks this. A component in the middle of the
    graph is bypassed instead (`bypassing`).
    """
    names = set(names)
    return {
        **data,
        "components": {name: spec for name, spec in data["components"].items() if name not in names},
        "connections": [
            c
            for c in data.get("connections", [])
            if c["sender"].split(".")[0] not in names and c["receiver"].split(".")[0] not in names
        ],
    }


def bypassing(data: Mapping[str, Any], name: str, socket: str) -> dict[str, Any]:
    """
    The pipeline data without component `name`, in the middle of the graph: what fed its input
    `socket` now feeds whatever its output `socket` fed (in that connection's place), and its other
    connections are dropped. Data without the component is returned as it is.
    """
    if name not in data["components"]:
        return dict(data)
    connections = data.get("connections", [])
    feeders = [c["sender"] for c in connections if c["receiver"] == f"{name}.{socket}"]
    joined = []
    for connection in connections:
        if connection["sender"] == f"{name}.{socket}":
            joined.extend({"sender": feeder, "receiver": connection["receiver"]} for feeder in feeders)
        elif name not in (connection["sender"].split(".")[0], connection["receiver"].split(".")[0]):
            joined.append(connection)
    pruned = without_components(data, [name])
    return {**pruned, "connections": joined}


def left_out_by_config(cfg: DictConfig) -> set[str]:
    """Side branches the config turns off: the sidecar, unless `sidecar.enabled`."""
    return set() if cfg.sidecar.enabled else {"sidecar"}


def bypassed_by_config(cfg: DictConfig) -> dict[str, str]:
    """
    Components the config takes out of the middle of the graph, each with the socket (an input and
    an output of one name) its neighbours are joined through: the reranker, unless `pipeline.rerank`.
    """
    return {} if cfg.pipeline.rerank else {"reranker": "candidates"}


def pipeline_data(
    cfg: DictConfig,
    name: str,
    leave_out: Iterable[str] = (),
    derived: Mapping[str, Any] | None = None,
    pruned: bool = True,
) -> dict[str, Any]:
    """
    The resolved data of pipeline `name` ("lookup" or "indexing") of `cfg`, without the components
    the config turns off (bypassed or left out; kept when not `pruned`) and those in `leave_out`.

    :raises ConfigError: The file is missing or no YAML mapping, or a `${...}` names no config key.
    """
    template = pipeline_template(cfg, name)
    try:
        resolved = resolve_pipeline_data(template, cfg, derived if derived is not None else derived_values(cfg))
    except OmegaConfBaseException as exc:
        own = _resolver_config_error(exc)
        if own is not None:  # `${knowledge_store:}` names the `milvus.*` key the store refused
            raise own from exc
        raise ConfigError(f"pipeline.{name}={cfg.pipeline[name]}: {first_line(exc, from_cause=True)}") from exc
    for component, socket in bypassed_by_config(cfg).items() if pruned else ():
        resolved = bypassing(resolved, component, socket)
    left_out = (left_out_by_config(cfg) if pruned else set()) | set(leave_out)
    return _config_secrets(without_components(resolved, left_out), cfg)


def _resolver_config_error(exc: BaseException) -> ConfigError | None:
    """The ConfigError a resolver raised, which OmegaConf wraps once per interpolation level."""
    while exc is not None and not isinstance(exc, ConfigError):
        exc = exc.__cause__ or exc.__context__
    return exc


def _config_key_message(cfg: DictConfig, name: str, component: str, error: ParameterError) -> str:
    """
    The error of a component's init parameter named by the config key the pipeline file wires into
    it (`top_k: ${retrieval.top_k}` -> `retrieval.top_k=-3: must be at least 1`), or by the
    component and parameter when the file sets it otherwise.
    """
    head, dot, rest = error.parameter.partition(".")  # `weights.bm25`: an entry of a mapping parameter
    key = wired_key(cfg, name, component, head)
    if key:
        return error.rename(key + dot + rest)
    return f"pipeline.{name}={cfg.pipeline[name]}: " + error.rename(f"{component}.{error.parameter}")


def _built(cfg: DictConfig, name: str, data: dict[str, Any]) -> Pipeline:
    """Pipeline.from_dict, an init parameter a component refuses named by its config key."""
    building: list[str] = []
    callbacks = DeserializationCallbacks(component_pre_init=lambda component, _cls, _params: building.append(component))
    try:
        return Pipeline.from_dict(data, callbacks=callbacks, allowed_modules=ALLOWED_MODULES)
    except (DeserializationError, PipelineError, TypeError, ValueError) as exc:
        if isinstance(exc.__cause__, ParameterError) and building:
            raise ConfigError(_config_key_message(cfg, name, building[-1], exc.__cause__)) from exc
        raise ConfigError(f"pipeline.{name}={cfg.pipeline[name]}: {first_line(exc, from_cause=True)}") from exc


def check_pipelines(cfg: DictConfig) -> None:
    """
    The config check of the keys the components take: every component of both pipelines is built
    from the config (also those it turns off), and so checks its init parameters; a refused one is
    named by its config key. Nothing is warmed up: no model is loaded, no Milvus opened.
    """
    for name in PIPELINE_NAMES:
        _built(cfg, name, pipeline_data(cfg, name, pruned=False))


def load_checked_config(overrides: Sequence[str] = ()) -> DictConfig:
    """`load_config`, and the components' own checks of their keys (`check_pipelines`): the CLI's config check."""
    cfg = load_config(list(overrides))
    check_pipelines(cfg)
    return cfg


def load_pipeline(
    cfg: DictConfig, name: str, leave_out: Iterable[str] = (), derived: Mapping[str, Any] | None = None
) -> Pipeline:
    """
    Pipeline `name` ("lookup" or "indexing") of `cfg`, built from its YAML file.

    :param leave_out: Side-branch components to leave out, e.g. `["trace_writer"]`.
    :param derived: `${derived.*}` values (default: `derived_values(cfg)`).
    :raises ConfigError: A file, interpolation, component type or init parameter that does not load.
    """
    leave_out = set(leave_out)
    full = pipeline_data(cfg, name, derived=derived)
    pipeline = _built(cfg, name, without_components(full, leave_out))
    _check_left_out_fed_only_optional_inputs(pipeline, full, leave_out)
    logger.debug("Loaded pipeline %s from %s without %s", name, pipeline_path(cfg, name), sorted(leave_out))
    return pipeline


def refuse_config_secrets(cfg: DictConfig) -> None:
    """A pipeline file may name the credentials' environment variables, never hold their values."""
    secrets = [key for key in SECRET_KEYS if OmegaConf.select(cfg, key)]
    if secrets:
        raise ConfigError(
            f"{', '.join(secrets)} set in the config cannot be written to a pipeline file: "
            "leave them empty and set MILVUS_TOKEN / MILVUS_USER / MILVUS_PASSWORD in the environment instead"
        )


def render_pipeline_yaml(cfg: DictConfig, name: str) -> str:
    """
    Pipeline `name` of `cfg` as a concrete YAML (every value resolved), with the `inputs` and
    `outputs` declarations hayhooks `deploy-yaml` needs. Load it with the module allowlist.
    """
    refuse_config_secrets(cfg)
    pipeline = load_pipeline(cfg, name)
    template = pipeline_template(cfg, name)
    present = set(pipeline.graph.nodes)
    io = {
        key: {io_name: target for io_name, target in template[key].items() if target.split(".")[0] in present}
        for key in HAYHOOKS_IO_KEYS
        if template.get(key)
    }
    return pipeline.dumps() + (yaml.safe_dump(io, sort_keys=True) if io else "")


def _check_left_out_fed_only_optional_inputs(pipeline: Pipeline, full: Mapping[str, Any], leave_out: set[str]) -> None:
    for connection in full.get("connections", []):
        sender = connection["sender"].split(".")[0]
        receiver, socket = connection["receiver"].split(".", 1)
        if sender not in leave_out or receiver in leave_out or receiver not in pipeline.graph.nodes:
            continue
        if pipeline.graph.nodes[receiver]["input_sockets"][socket].is_mandatory:
            raise ConfigError(f"cannot leave out {sender}: {receiver}.{socket} needs its output")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.serialized",
        description="Write the lookup and indexing pipelines resolved against a config, for hayhooks deploy-yaml.",
    )
    parser.add_argument("--output", required=True, type=Path, help="folder to write the YAML files into")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. pipeline.rerank=false retrieval.top_k=7")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.overrides)
        rendered = {name: render_pipeline_yaml(cfg, name) for name in PIPELINE_NAMES}
        args.output.mkdir(parents=True, exist_ok=True)
        for name, text in rendered.items():
            target = args.output / RENDERED_FILE_NAMES[name]
            header = f"# Rendered from {pipeline_path(cfg, name).name} with overrides {args.overrides}: do not edit.\n"
            target.write_text(header + text, encoding="utf-8")
            print(f"wrote {target}")
    except (ConfigError, OSError) as exc:
        message = first_line(exc, from_cause=not isinstance(exc, ConfigError))
        print(f"error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
