"""
Typed configuration: Hydra config groups in `conf/`, validated by the dataclasses below.

Every key of the user-facing contract lives here with its type, so a bad override
(unknown key, wrong type) fails at composition with one clear message instead of deep
inside a component. Library code and tests compose with `load_config(overrides)`.
"""

from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
SCHEMA_NAME = "knowledge_schema"


class ConfigError(ValueError):
    """A configuration that cannot be composed or validated (CLI exit status 2)."""


@dataclass
class PathsConfig:
    state_dir: str = ".knowledge"


@dataclass
class KbConfig:
    path: str = "knowledge/"


@dataclass
class MilvusConfig:
    uri: str = "${paths.state_dir}/milvus.db"
    collection: str = "knowledge"
    index_type: str = "FLAT"
    index_params: dict[str, Any] = field(default_factory=dict)
    search_params: dict[str, Any] = field(default_factory=dict)


@dataclass
class EmbedderConfig:
    model: str = "packaged:all-MiniLM-L6-v2"
    batch_size: int = 32
    device: str = "cpu"


@dataclass
class ChunkingConfig:
    max_tokens: int = 200
    overlap_tokens: int = 32
    min_tokens: int = 8


@dataclass
class L0Config:
    index_path: str = "${paths.state_dir}/${milvus.collection}.l0.json"
    title_min_overlap: float = 0.6
    domain_from_matches: bool = True
    domain_min_precision: float = 0.5


@dataclass
class QueryConfig:
    max_chars: int = 2000
    on_overlong: str = "truncate"
    expand_entities: bool = True


@dataclass
class RetrievalConfig:
    top_k: int = 20
    max_evidence: int = 5
    reference_threshold: float = 0.5
    evidence_threshold: float = 0.35
    uncovered_evidence_threshold: float = 0.5
    high_relevance: float = 0.6
    per_document_cap: int = 2
    l1_enabled: bool = True
    vector_store_mode: str = "sdk"


@dataclass
class RerankConfig:
    weights: dict[str, float] = field(default_factory=dict)


@dataclass
class ContextConfig:
    budget_tokens: int = 1200


@dataclass
class SidecarConfig:
    enabled: bool = False
    path: str = "other"


@dataclass
class TraceConfig:
    db_url: str = "sqlite:///${paths.state_dir}/traces.db"
    spool_path: str = "${paths.state_dir}/trace-spool.jsonl"
    summary_chars: int = 200
    retry_interval_s: float = 5.0


@dataclass
class MlflowConfig:
    tracking_uri: str | None = "sqlite:///${paths.state_dir}/mlflow.db"
    experiment: str = "lookup-knowledge"
    artifact_location: str | None = "${paths.state_dir}/mlflow-artifacts"
    sample_rate: float = 1.0


@dataclass
class KnowledgeConfig:
    paths: PathsConfig = field(default_factory=PathsConfig)
    kb: KbConfig = field(default_factory=KbConfig)
    milvus: MilvusConfig = field(default_factory=MilvusConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    l0: L0Config = field(default_factory=L0Config)
    query: QueryConfig = field(default_factory=QueryConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    sidecar: SidecarConfig = field(default_factory=SidecarConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)


_CHOICES = {
    "retrieval.vector_store_mode": ("sdk", "haystack", "auto"),
    "sidecar.path": ("other", "sdk", "haystack"),
    "query.on_overlong": ("truncate", "error"),
}


def _register_schema() -> None:
    ConfigStore.instance().store(name=SCHEMA_NAME, node=KnowledgeConfig)


def _check_known_keys(cfg: DictConfig, schema: type = KnowledgeConfig, prefix: str = "") -> None:
    """Hydra lets `+key=value` add a key the schema does not have, which nothing would ever read."""
    known = {f.name: f.type for f in fields(schema)}
    for key in cfg:
        if key not in known:
            raise ConfigError(f"{prefix}{key}: unknown key; known keys: {', '.join(prefix + k for k in known)}")
        if is_dataclass(known[key]):
            _check_known_keys(cfg[key], known[key], f"{prefix}{key}.")


def _validate_values(cfg: DictConfig) -> None:
    for key, allowed in _CHOICES.items():
        value = OmegaConf.select(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{key}={value!r} is not one of {', '.join(allowed)}")
    retrieval = cfg.retrieval
    for key in ("reference_threshold", "evidence_threshold", "uncovered_evidence_threshold", "high_relevance"):
        if not 0.0 <= retrieval[key] <= 1.0:
            raise ConfigError(f"retrieval.{key}={retrieval[key]} must lie in [0, 1] (a normalized similarity)")
    for key in ("top_k", "max_evidence", "per_document_cap"):
        if retrieval[key] < 1:
            raise ConfigError(f"retrieval.{key}={retrieval[key]} must be at least 1")
    if cfg.trace.summary_chars < 0:
        raise ConfigError(f"trace.summary_chars={cfg.trace.summary_chars} must be at least 0")
    if cfg.trace.retry_interval_s < 0:
        raise ConfigError(f"trace.retry_interval_s={cfg.trace.retry_interval_s} must be at least 0")
    if cfg.context.budget_tokens < 16:
        raise ConfigError(f"context.budget_tokens={cfg.context.budget_tokens} must be at least 16")
    chunking = cfg.chunking
    if chunking.max_tokens < 16 or not 0 <= chunking.overlap_tokens < chunking.max_tokens:
        raise ConfigError("chunking needs max_tokens >= 16 and 0 <= overlap_tokens < max_tokens")
    unknown = set(cfg.rerank.weights) - set(KNOWN_RERANK_SIGNALS)
    if unknown:
        raise ConfigError(
            f"rerank.weights has unknown signal(s) {sorted(unknown)}; known: {', '.join(KNOWN_RERANK_SIGNALS)}"
        )


KNOWN_RERANK_SIGNALS = (
    "similarity",
    "document_similarity",
    "lexical_overlap",
    "title_overlap",
    "document_lexical",
    "name_match",
    "title_match",
    "keyword_match",
    "entity_match",
    "domain_match",
    "section_match",
    "document_support",
)


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    message = text[0] if text else type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        message = str(cause).strip().splitlines()[0]
        full_key = getattr(cause, "full_key", None)
        if full_key and full_key not in message:
            message = f"{full_key}: {message}"
    return message


def load_config(overrides: list[str] | tuple[str, ...] = (), config_dir: Path | None = None) -> DictConfig:
    """
    Compose the configuration from `conf/` with Hydra overrides such as `retrieval.top_k=30`.

    Interpolations are resolved, so callers get plain values. Raises `ConfigError` with a
    one-line reason for an unknown key, a wrong type or an out-of-range value.
    """
    _register_schema()
    directory = str((config_dir or CONF_DIR).resolve())
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=directory, version_base="1.3"):
            cfg = compose(config_name="config", overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except Exception as exc:  # Hydra raises several exception types, all of them a config problem here
        raise ConfigError(_one_line(exc)) from exc
    finally:
        GlobalHydra.instance().clear()
    _check_known_keys(cfg)
    _validate_values(cfg)
    return cfg


def to_container(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain dicts, for logging and MLflow params."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
