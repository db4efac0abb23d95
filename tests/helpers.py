"""Small helpers shared by the tests: reading a collection back, running the CLI as a user would."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from components.common.embedding_models import resolve_model
from components.stores.milvus_collection import METADATA_FIELD, connect, ensure_loaded

REPO = Path(__file__).resolve().parent.parent
MODEL = "packaged:all-MiniLM-L6-v2"


def collection_rows(
    cfg, output_fields: tuple[str, ...] = ("id", "metadata", "category", "content")
) -> list[dict[str, Any]]:
    """Every row of the configured collection (empty when it does not exist)."""
    client = connect(cfg.milvus.uri)
    name = cfg.milvus.collection
    if not client.has_collection(name):
        return []
    ensure_loaded(client, name)
    rows: list[dict[str, Any]] = []
    iterator = client.query_iterator(name, batch_size=1000, filter="", output_fields=list(output_fields))
    try:
        while batch := iterator.next():
            rows.extend(batch)
    finally:
        iterator.close()
    return rows


def ids_by_source(cfg) -> dict[str, set[str]]:
    """Chunk ids of each source in the collection."""
    result: dict[str, set[str]] = {}
    for row in collection_rows(cfg, ("id", METADATA_FIELD)):
        result.setdefault(row[METADATA_FIELD]["source"], set()).add(row["id"])
    return result


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process of the tests: this checkout's code, offline, no key or debug of the caller."""
    env = {k: v for k, v in os.environ.items() if k not in ("KNOWLEDGE_API_KEY", "KNOWLEDGE_DEBUG")}
    # This checkout's code first; the caller's own path after it (packages tried out of the venv).
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(PYTHONPATH=os.pathsep.join(paths), HF_HUB_OFFLINE="1", HAYSTACK_TELEMETRY_ENABLED="False")
    env.update(HF_HUB_DISABLE_PROGRESS_BARS="1", **extra)
    return env


def cli_command(*args: str) -> list[str]:
    """The command line of `knowledge ARGS` run with this interpreter."""
    return [sys.executable, "-m", "pipelines.cli", *args]


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """`knowledge ARGS` in its own process (`child_env` plus `env`), output captured."""
    return subprocess.run(
        cli_command(*args), cwd=cwd, env=child_env(**env), capture_output=True, text=True, timeout=timeout
    )


def run_main(capsys, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """
    `knowledge ARGS` through `pipelines.cli.main` in this process, from `cwd`, its output taken from
    `capsys`: what `run_cli` returns, without a process start and model load per call.
    """
    from contextlib import chdir

    from pipelines.cli import main

    capsys.readouterr()  # only this call's output
    with chdir(cwd):
        code = main(list(args))
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["knowledge", *args], code, captured.out, captured.err)


def stderr_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def derived_config(cfg, *overrides: str):
    """The config of an indexed test knowledge base (same state and KB) with more overrides."""
    from pipelines.config.settings import load_config

    return load_config([f"paths.state_dir={cfg.paths.state_dir}", f"kb.path={cfg.kb.path}", "mlflow=off", *overrides])


def lookup_with(cfg, query: str, *overrides: str, include: tuple[str, ...] = ()):
    """
    One lookup through a pipeline built from `cfg` plus overrides: (result, outputs), where
    `outputs` holds the outputs of the components named in `include` (e.g. "retriever").
    """
    from pipelines.lookup import build_lookup_pipeline

    pipeline = build_lookup_pipeline(derived_config(cfg, *overrides))
    outputs = pipeline.run({"query_transformer": {"query": query}}, include_outputs_from={"assembler", *include})
    return outputs["assembler"]["result"], outputs


def looks_up(cfg, *overrides: str):
    """`lookup_with` for many queries: the pipeline built once, a function of the query to the result."""
    from pipelines.lookup import build_lookup_pipeline

    pipeline = build_lookup_pipeline(derived_config(cfg, *overrides))

    def lookup(query: str):
        return pipeline.run({"query_transformer": {"query": query}}, include_outputs_from={"assembler"})["assembler"][
            "result"
        ]

    return lookup


def assert_round_trips(instance) -> None:
    """
    A component's to_dict/from_dict round trip gives the same init parameters, all plain YAML types.
    It loads as a pipeline file does, with the module allowlist: a value an init parameter holds
    (`auth`, a `MilvusAuth`) is a class of its own to import, and compares by its serialized form.
    """
    import yaml
    from haystack import Pipeline
    from haystack.core.serialization import component_to_dict

    data = component_to_dict(instance, "component")
    assert data["type"] == f"{type(instance).__module__}.{type(instance).__name__}"
    restored = Pipeline.from_dict(
        {"components": {"component": data}, "connections": []}, allowed_modules=["components"]
    ).get_component("component")
    assert type(restored) is type(instance)
    assert component_to_dict(restored, "component") == data
    for key, value in data["init_parameters"].items():
        restored_value = getattr(restored, key)
        assert (restored_value.to_dict() if hasattr(restored_value, "to_dict") else restored_value) == value
    assert yaml.safe_load(yaml.safe_dump(data)) == data  # plain types only


def candidate(key: str, source: str, similarity: float, *reasons: str, **fields):
    """A `Candidate` as the sdk path returns it, with defaults for what a test does not care about."""
    from components.contracts import Candidate

    return Candidate(
        evidence_key=key,
        source=source,
        content=fields.pop("content", f"content of {key}"),
        similarity=similarity,
        raw_score=round(2 - 2 * similarity, 6),
        raw_score_label="l2_squared_distance",
        path="sdk",
        title=fields.pop("title", f"Title of {source}"),
        breadcrumb=fields.pop("breadcrumb", f"Title of {source} > Section {key}"),
        category=fields.pop("category", "ops"),
        hit_reasons=list(reasons),
        final_score=fields.pop("final_score", similarity),
        **fields,
    )


# The last layer's bias of the packaged model, shifted by `shifted_model`.
SHIFTED_BIAS = "encoder.layer.5.output.LayerNorm.bias"


def shifted_model(folder: Path, shift: float = 10.0) -> Path:
    """
    The packaged model with one constant direction added to every token's last hidden state: every
    text's embedding leans the same way, so every similarity sits higher, off-topic ones included,
    as an adapted model's do (the model a decision on its own scale would let through).
    """
    from safetensors.numpy import load_file, save_file

    shutil.copytree(resolve_model(MODEL), folder)
    weights = load_file(str(folder / "model.safetensors"))
    direction = np.random.default_rng(0).normal(size=weights[SHIFTED_BIAS].shape).astype(np.float32)
    weights[SHIFTED_BIAS] = weights[SHIFTED_BIAS] + shift * direction / np.linalg.norm(direction)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    # No adapt.json: the folder's revision is "" (components/common/embedding_models.py's model_revision).
    calibration = {"method": "packaged_decides", "decision_model": MODEL, "thresholds": {}, "model_revision": ""}
    (folder / "calibration.json").write_text(json.dumps(calibration), encoding="utf-8")
    return folder


def count_stats(monkeypatch, path) -> list[str]:
    """The `os.stat` and `os.lstat` calls on `path` from now on, one item ("stat" or "lstat") each."""
    calls, target = [], os.path.abspath(path)
    for name in ("stat", "lstat"):
        real = getattr(os, name)

        def counting(file, *args, _real=real, _name=name, **kwargs):
            if isinstance(file, (str, os.PathLike)) and os.path.abspath(os.fspath(file)) == target:
                calls.append(_name)
            return _real(file, *args, **kwargs)

        monkeypatch.setattr(os, name, counting)
    return calls
