"""load_config: typed Hydra configuration, overrides, and one-line errors (CLI exit status 2)."""

import re

import pytest

from pipelines.cli import main
from pipelines.config.settings import ConfigError, load_config
from pipelines.serialized import load_checked_config
from tests.helpers import run_cli, stderr_lines

BAD_OVERRIDES = [
    # (override, key the message must name, what else it says)
    ("retrieval.nope=1", "retrieval.nope", "not in"),
    ("nope=1", "nope", "not in"),
    ("+retrieval.top_kk=5", "retrieval.top_kk", "unknown key"),
    ("+nope=1", "nope", "unknown key"),
    ("retrieval.top_k=abc", "retrieval.top_k", "could not be converted"),
    ("retrieval.l1_enabled=maybe", "retrieval.l1_enabled", "not a valid bool"),
    ("retrieval.reference_threshold=1.5", "retrieval.reference_threshold", "[0, 1]"),
    ("retrieval.evidence_threshold=-0.1", "retrieval.evidence_threshold", "[0, 1]"),
    ("retrieval.high_relevance=2", "retrieval.high_relevance", "[0, 1]"),
    ("retrieval.top_k=0", "retrieval.top_k", "at least 1"),
    ("retrieval.vector_store_mode=bogus", "retrieval.vector_store_mode", "sdk, haystack, auto"),
    ("sidecar.path=elsewhere", "sidecar.path", "other, sdk, haystack"),
    ("query.on_overlong=explode", "query.on_overlong", "truncate, error"),
    ("context.budget_tokens=0", "context.budget_tokens", "at least 1"),
    ("chunking.max_tokens=8", "chunking.max_tokens", "at least 16"),
    ("chunking.overlap_tokens=500", "chunking.overlap_tokens", "[0, max_tokens)"),
    ("rerank.weights.foo=1", "rerank.weights.foo", "not in struct"),
    ("+rerank.weights.foo=1", "rerank.weights", "foo"),
    ("milvus=nosuchgroup", "milvus", "Could not find"),
    ("trace.db_url=notaurl", "trace.db_url", "not a database URL"),
    ("trace.db_url=mysql://u@h/db", "trace.db_url", "not a database URL"),
    ("milvus.index_type=IVF_PQ", "milvus.index_type", "FLAT, IVF_FLAT, HNSW, AUTOINDEX"),
    ("query.max_chars=0", "query.max_chars", "at least 1"),
    ("query.max_chars=-1", "query.max_chars", "at least 1"),
    ("embedder.batch_size=0", "embedder.batch_size", "at least 1"),
    ("embedder.backend=tensorflow", "embedder.backend", "torch, onnx, onnx_int8"),
    ("retrieval.max_evidence=-2", "retrieval.max_evidence", "at least 1"),
    ("retrieval.per_document_cap=-1", "retrieval.per_document_cap", "at least 1"),
    ("context.budget_tokens=-5", "context.budget_tokens", "at least 1"),
    ("trace.summary_chars=-1", "trace.summary_chars", "at least 0"),
    ("chunking.min_tokens=-1", "chunking.min_tokens", "at least 0"),
    ("l0.title_min_overlap=1.5", "l0.title_min_overlap", "[0, 1]"),
    ("l0.domain_min_precision=-0.5", "l0.domain_min_precision", "[0, 1]"),
    ("rerank.weights.name_match=-0.5", "rerank.weights.name_match", "at least 0"),
    ("rerank.weights.bm25=-0.1", "rerank.weights.bm25", "at least 0"),
    ("retrieval.bm25_top_k=-1", "retrieval.bm25_top_k", "at least 0"),
    ("retrieval.bm25_top_k=many", "retrieval.bm25_top_k", "could not be converted"),
    ("retrieval.outscored_margin=1.5", "retrieval.outscored_margin", "[0, 1]"),
    ("l0.subject_elsewhere_margin=-0.1", "l0.subject_elsewhere_margin", "[0, 1]"),
    ("milvus.full_text=maybe", "milvus.full_text", "not a valid bool"),
    ("l0.passing_mention_df=-1", "l0.passing_mention_df", "at least 0"),
    ("milvus.timeout_ms=-1", "milvus.timeout_ms", "at least 0"),
    ("milvus.collection=", "milvus.collection", "1-255 letters"),
    ("milvus.uri=nowhere", "milvus.uri", "neither a Milvus Lite file"),
    ("trace.timeout_s=-1", "trace.timeout_s", "at least 0"),
    ("trace.retry_interval_s=-1", "trace.retry_interval", "at least 0"),
    ("mlflow.sample_rate=2", "mlflow.sample_rate", "[0, 1]"),
    ("mlflow.experiment=", "mlflow.experiment", "non-empty"),
    ("serve.port=0", "serve.port", "at least 1"),
    ("guard.level=1.5", "guard.level", "[0, 1]"),
]


@pytest.mark.parametrize(("override", "key", "reason"), BAD_OVERRIDES, ids=[o for o, _, _ in BAD_OVERRIDES])
def test_bad_override_is_a_one_line_config_error(override, key, reason):
    with pytest.raises(ConfigError) as error:
        load_checked_config([override])
    message = str(error.value)
    assert "\n" not in message.strip()
    assert key in message
    assert reason in message


def test_defaults():
    cfg = load_config()
    assert cfg.kb.path == "knowledge/"
    assert cfg.milvus.uri == ".knowledge/milvus.db"
    assert cfg.milvus.collection == "knowledge"
    assert cfg.embedder.model == "packaged:all-MiniLM-L6-v2"
    assert cfg.embedder.backend == "onnx" and cfg.embedder.onnx_cache_dir is None
    assert cfg.retrieval.vector_store_mode == "sdk"
    assert cfg.sidecar.enabled is False
    assert cfg.trace.db_url == "sqlite:///.knowledge/traces.db"
    assert cfg.mlflow.tracking_uri == "sqlite:///.knowledge/mlflow.db"
    assert cfg.l0.index_path == ".knowledge/knowledge.l0.json"


def test_overrides_change_values(tmp_path):
    cfg = load_config(
        [
            "retrieval.top_k=7",
            "retrieval.reference_threshold=0.55",
            "retrieval.l1_enabled=false",
            "retrieval.vector_store_mode=auto",
            f"paths.state_dir={tmp_path}",
            "milvus.collection=runbooks",
            "+milvus.index_params.nlist=64",
        ]
    )
    assert cfg.retrieval.top_k == 7
    assert cfg.retrieval.reference_threshold == 0.55
    assert cfg.retrieval.l1_enabled is False
    assert cfg.retrieval.vector_store_mode == "auto"
    # Interpolations follow the overrides and are resolved.
    assert cfg.milvus.uri == f"{tmp_path}/milvus.db"
    assert cfg.l0.index_path == f"{tmp_path}/runbooks.l0.json"
    assert cfg.trace.db_url == f"sqlite:///{tmp_path}/traces.db"
    assert dict(cfg.milvus.index_params) == {"nlist": 64}


def test_config_groups_switch_together():
    server = load_config(["milvus=server", "mlflow=off"])
    assert server.milvus.uri.startswith("http://")
    assert server.milvus.index_type == "IVF_FLAT"
    assert server.mlflow.tracking_uri is None
    assert load_config(["trace=postgres"]).trace.db_url.startswith("postgresql+psycopg://")


def test_postgres_trace_url_comes_from_the_environment_else_a_knowledge_database(monkeypatch):
    monkeypatch.delenv("KNOWLEDGE_TRACE_DB_URL", raising=False)
    assert load_config(["trace=postgres"]).trace.db_url == "postgresql+psycopg://127.0.0.1:5432/knowledge"
    url = "postgresql://tracer@db.example:5432/traces?options=-csearch_path%3Dlk"
    monkeypatch.setenv("KNOWLEDGE_TRACE_DB_URL", url)
    assert load_config(["trace=postgres"]).trace.db_url == url
    assert load_config(["trace=postgres", "trace.db_url=sqlite:///x.db"]).trace.db_url == "sqlite:///x.db"


def test_cli_bad_override_exits_2_with_one_line(tmp_path):
    result = run_cli(
        "index",
        "--kb",
        str(tmp_path),
        "retrieval.top_k=abc",
        f"paths.state_dir={tmp_path / 's'}",
        "mlflow=off",
        cwd=tmp_path,
    )
    lines = stderr_lines(result)
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith("knowledge: error: ") and "retrieval.top_k" in lines[0]
    assert result.stdout == ""
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["index", "retrieval.reference_threshold=7"], "retrieval.reference_threshold"),
        (["index", "+retrieval.nope=1"], "retrieval.nope"),
        (["index", "retrieval.vector_store_mode=fast"], "retrieval.vector_store_mode"),
        (["index", "not-an-override"], "key=value"),
        (["lookup", "disk full", "retrieval.top_k=-1"], "retrieval.top_k"),
    ],
)
def test_main_bad_config_exits_2(args, fragment, capsys, tmp_path, monkeypatch):
    # Were the config accepted, the command would run: keep whatever it writes in tmp_path.
    monkeypatch.chdir(tmp_path)
    assert main([*args, f"paths.state_dir={tmp_path / 'state'}", "mlflow=off", f"kb.path={tmp_path / 'kb'}"]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert fragment in lines[0]
    assert captured.out == ""


def test_schema_holds_no_values():
    """Each value is defined once, in conf/: the typed schema only types the keys."""
    from dataclasses import fields, is_dataclass

    from omegaconf import MISSING

    from pipelines.config.settings import KnowledgeConfig

    for group in fields(KnowledgeConfig):
        assert is_dataclass(group.type), group.name
        for key in fields(group.type):
            assert key.default is MISSING, f"{group.name}.{key.name}"


def test_choices_come_back_as_plain_strings():
    cfg = load_config(["retrieval.vector_store_mode=auto", "milvus=server"])
    assert type(cfg.retrieval.vector_store_mode) is str and cfg.retrieval.vector_store_mode == "auto"
    assert type(cfg.milvus.index_type) is str and cfg.milvus.index_type == "IVF_FLAT"
    assert type(cfg.query.on_overlong) is str and type(cfg.sidecar.path) is str


def test_the_store_credentials_take_the_config_before_the_environment(monkeypatch):
    from pipelines.config.settings import knowledge_store

    monkeypatch.setenv("MILVUS_TOKEN", "tok-env-2c")  # not secrets: throwaway values
    monkeypatch.setenv("MILVUS_USER", "user-env-2c")
    monkeypatch.delenv("MILVUS_PASSWORD", raising=False)
    cfg = load_config(["milvus.user=user-cfg-2c", "milvus.server_pem_path=/certs/milvus.pem"])
    store = knowledge_store(cfg)
    assert store.credentials() == {"token": "tok-env-2c", "user": "user-cfg-2c", "server_pem_path": "/certs/milvus.pem"}
    assert "user-cfg-2c" not in repr(store) and "tok-env-2c" not in repr(store)


def test_the_store_takes_every_milvus_key_of_the_config():
    from pipelines.config.settings import knowledge_store

    cfg = load_config(["milvus=server", "milvus.timeout_ms=2500", "milvus.collection=kb2", "milvus.full_text=true"])
    store = knowledge_store(cfg)
    assert (store.uri, store.collection, store.timeout_ms, store.full_text) == (cfg.milvus.uri, "kb2", 2500, True)
    assert (store.index_type, store.index_params, store.search_params) == ("IVF_FLAT", {"nlist": 128}, {"nprobe": 16})
    assert (store.auth.secure, store.auth.server_pem_path) == (False, None)


def test_settings_bound_no_key_a_component_checks():
    """One bound per key: a key wired into a component (pipelines/yaml, the store's `milvus.*`) is the component's."""
    from pipelines.config import settings
    from pipelines.config.pipeline_files import YAML_DIR

    wired = {f"milvus.{key}" for key in settings.STORE_KEYS}
    for path in YAML_DIR.glob("*.yml"):
        wired |= set(re.findall(r"\$\{([a-z_]+\.[a-z_.]+)\}", path.read_text(encoding="utf-8")))
    bounded = {*settings._AT_LEAST, *settings._POSITIVE, *settings._UNIT_INTERVAL}
    assert "retrieval.top_k" in wired and "serve.port" in bounded
    assert not bounded & wired
