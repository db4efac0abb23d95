"""
Typed configuration: Hydra config groups in `conf/`, validated by the dataclasses below.

Every key of the user-facing contract lives here with its type, so a bad override (unknown key, wrong type) fails at
composition with one clear message instead of deep inside a component. The schema holds no value: conf/ defines each
value once, and a key no YAML file sets fails as missing.
"""

from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import MISSING, DictConfig, OmegaConf

from components.common.choices import (
    DecisionScope,
    EmbeddingBackend,
    IndexType,
    OnOverlong,
    SidecarPath,
    VectorStoreMode,
    check_at_least,
    check_seconds,
    check_unit_interval,
)
from components.common.masking import MASK, masked
from components.errors import BadInputError, ParameterError
from pipelines.config.messages import config_message
from pipelines.config.model_calibration import apply_calibration

if TYPE_CHECKING:
    from components.stores.knowledge_store import KnowledgeStore

# pipelines/conf links to the repository's conf/ and is a copy of it in an installed wheel.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
SCHEMA_NAME = "knowledge_schema"


class ConfigError(BadInputError):
    """A configuration that cannot be composed or validated (CLI exit status 2)."""


@dataclass
class PathsConfig:
    state_dir: str = MISSING


@dataclass
class KbConfig:
    path: str = MISSING


@dataclass
class MilvusConfig:
    uri: str = MISSING
    collection: str = MISSING
    index_type: IndexType = MISSING
    index_params: dict[str, Any] = MISSING
    search_params: dict[str, Any] = MISSING
    timeout_ms: int = MISSING
    token: str | None = MISSING
    user: str | None = MISSING
    password: str | None = MISSING
    secure: bool = MISSING
    server_pem_path: str | None = MISSING
    full_text: bool = MISSING


@dataclass
class EmbedderConfig:
    model: str = MISSING
    batch_size: int = MISSING
    device: str = MISSING
    backend: EmbeddingBackend = MISSING
    onnx_cache_dir: str | None = MISSING
    decision_model: str | None = MISSING
    decision_vectors: str = MISSING
    decision_scope: DecisionScope = MISSING


@dataclass
class ChunkingConfig:
    max_tokens: int = MISSING
    overlap_tokens: int = MISSING
    min_tokens: int = MISSING


@dataclass
class L0Config:
    index_path: str = MISSING
    title_min_overlap: float = MISSING
    domain_from_matches: bool = MISSING
    domain_min_precision: float = MISSING
    subject_elsewhere_margin: float = MISSING
    passing_mention_df: int = MISSING


@dataclass
class QueryConfig:
    max_chars: int = MISSING
    on_overlong: OnOverlong = MISSING
    expand_entities: bool = MISSING


@dataclass
class RetrievalConfig:
    top_k: int = MISSING
    max_evidence: int = MISSING
    reference_threshold: float = MISSING
    evidence_threshold: float = MISSING
    uncovered_evidence_threshold: float = MISSING
    high_relevance: float = MISSING
    per_document_cap: int = MISSING
    l1_enabled: bool = MISSING
    vector_store_mode: VectorStoreMode = MISSING
    category_filter: bool = MISSING
    bm25_top_k: int = MISSING
    outscored_margin: float = MISSING
    scan_depth: int = MISSING
    resident_max_chunks: int = MISSING
    calibration: str = MISSING


@dataclass
class RerankConfig:
    weights: dict[str, float] = MISSING


@dataclass
class CompetitionConfig:
    margin: float = MISSING
    sibling_margin: float = MISSING
    sibling_similarity: float = MISSING
    cross_reference: bool = MISSING
    high_margin: float = MISSING
    high_needs_agreement: bool = MISSING


@dataclass
class ContextConfig:
    budget_tokens: int = MISSING


@dataclass
class SidecarConfig:
    enabled: bool = MISSING
    path: SidecarPath = MISSING


@dataclass
class TraceConfig:
    db_url: str = MISSING
    spool_path: str = MISSING
    summary_chars: int = MISSING
    retry_interval_s: float = MISSING
    timeout_s: float = MISSING


@dataclass
class MlflowConfig:
    tracking_uri: str | None = MISSING
    experiment: str = MISSING
    artifact_location: str | None = MISSING
    sample_rate: float = MISSING


@dataclass
class ServeConfig:
    host: str = MISSING
    port: int = MISSING
    mcp_port: int = MISSING
    api_key: str | None = MISSING
    max_body_bytes: int = MISSING
    workers: int = MISSING
    max_concurrent_lookups: int | None = MISSING
    cors_origins: list[str] = MISSING
    allowed_hosts: list[str] = MISSING
    allowed_origins: list[str] = MISSING
    health_timeout_s: float = MISSING
    read_timeout_s: float = MISSING


@dataclass
class GuardConfig:
    sets: list[str] = MISSING
    constraints: list[str] = MISSING
    primary_metric: str = MISSING
    level: float = MISSING
    min_off_topic: int = MISSING
    tolerance: float | None = MISSING
    min_fit: float = MISSING


@dataclass
class PipelineConfig:
    """The YAML pipelines to load (names under pipelines/yaml/ or absolute paths), and the reranker on or off."""

    lookup: str = MISSING
    indexing: str = MISSING
    rerank: bool = MISSING


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
    competition: CompetitionConfig = field(default_factory=CompetitionConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    sidecar: SidecarConfig = field(default_factory=SidecarConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)


MAX_PORT = 65535
# The bounds of the keys no component takes; a component's key is checked by the component, built from the
# config when the pipelines are loaded (pipelines/serialized.py `check_pipelines`).
_AT_LEAST = {
    "serve.port": 1,
    "serve.mcp_port": 1,
    "serve.max_body_bytes": 1,
    "serve.workers": 1,
    "guard.min_off_topic": 0,
}
_POSITIVE = ("serve.read_timeout_s", "serve.health_timeout_s")  # finite and over 0: 0 or inf turns a guard off
_UNIT_INTERVAL = ("guard.level", "guard.min_fit")


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
    try:
        check_unit_interval(**{key: OmegaConf.select(cfg, key) for key in _UNIT_INTERVAL})
        for key, lowest in _AT_LEAST.items():
            check_at_least(lowest, **{key: OmegaConf.select(cfg, key)})
        check_seconds(**{key: OmegaConf.select(cfg, key) for key in _POSITIVE})
    except ParameterError as exc:
        raise ConfigError(exc.rename(exc.parameter)) from exc
    if cfg.guard.tolerance is not None and not 0.0 <= cfg.guard.tolerance <= 1.0:  # null: no relative guard
        raise ConfigError(f"guard.tolerance={cfg.guard.tolerance} must lie in [0, 1], or be null (no relative guard)")
    for key in ("serve.port", "serve.mcp_port"):
        if OmegaConf.select(cfg, key) > MAX_PORT:
            raise ConfigError(f"{key}={OmegaConf.select(cfg, key)} is not a TCP port (1-{MAX_PORT})")


# Milvus's parameter dicts take any entry: struct mode refuses new keys on their empty default, so overrides get `++`.
OPEN_MAPS = ("milvus.index_params", "milvus.search_params")


def open_map_overrides(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """`milvus.search_params={nprobe:16}` -> `++milvus.search_params={nprobe:16}` (other overrides as given)."""
    opened = []
    for override in overrides:
        key = override.split("=", 1)[0]
        if "=" in override and any(key == name or key.startswith(f"{name}.") for name in OPEN_MAPS):
            override = f"++{override}"
        opened.append(override)
    return opened


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
            cfg = compose(config_name="config", overrides=open_map_overrides(overrides))
        OmegaConf.resolve(cfg)
    except Exception as exc:  # Hydra raises several exception types, all of them a config problem here
        raise ConfigError(config_message(exc)) from exc
    finally:
        GlobalHydra.instance().clear()
    _check_known_keys(cfg)
    apply_calibration(cfg, overrides)  # a model folder's thresholds, before they are validated
    _validate_values(cfg)
    return _plain_values(cfg)


def _plain_values(cfg: DictConfig) -> DictConfig:
    """The validated config with choices as plain strings (components and YAML take no enums); still closed to new keys."""
    plain = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    OmegaConf.set_struct(plain, True)
    return plain


def to_container(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain dicts, for logging and MLflow params."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def embedder_params(cfg: DictConfig) -> dict[str, Any]:
    """The init parameters every embedding component takes from `embedder.*` (batch size aside)."""
    embedder = cfg.embedder
    return {
        "model": embedder.model,
        "device": embedder.device,
        "backend": embedder.backend,
        "onnx_cache_dir": embedder.onnx_cache_dir,
    }


# Config keys that hold secrets: masked wherever the config is shown or logged (MLflow params).
SECRET_KEYS = ("milvus.token", "milvus.user", "milvus.password")
# Config keys holding a URL that may carry a password (`postgresql://user:PASSWORD@host/db`): it is hidden.
URL_KEYS = ("trace.db_url", "mlflow.tracking_uri", "milvus.uri")


def masked_value(key: str, value: Any) -> Any:
    """A config value as it may be shown or logged: a credential masked, a URL's password hidden."""
    if key in SECRET_KEYS and value not in (None, "", "None"):
        return MASK
    if key in URL_KEYS and isinstance(value, str):
        return masked(value)
    return value


def mask_secrets(cfg: DictConfig) -> DictConfig:
    """A copy of the config with every credential masked (`--cfg`, logs)."""
    masked = cfg.copy()
    for key in (*SECRET_KEYS, *URL_KEYS):
        value = OmegaConf.select(masked, key)
        if value is not None:
            OmegaConf.update(masked, key, masked_value(key, value))
    return masked


# The `milvus.*` keys a `KnowledgeStore` takes as they are; the credentials and TLS go into its `MilvusAuth`.
STORE_KEYS = ("uri", "collection", "timeout_ms", "index_type", "index_params", "search_params", "full_text")


def store_parameters(cfg: DictConfig) -> dict[str, Any]:
    """The `KnowledgeStore` init parameters of a config, `auth` aside."""
    return {
        key: OmegaConf.to_object(value) if isinstance(value, DictConfig) else value
        for key, value in ((key, cfg.milvus[key]) for key in STORE_KEYS)
    }


def knowledge_store(cfg: DictConfig) -> "KnowledgeStore":
    """
    The Milvus store of a config, as every component, evaluation, benchmark and `/health` use it:
    a credential the config leaves empty is read from its environment variable (`MILVUS_TOKEN`, ...).
    """
    from haystack.utils import Secret

    from components.stores.knowledge_store import KnowledgeStore
    from components.stores.milvus_auth import CREDENTIAL_ENV, MilvusAuth, env_secret

    milvus = cfg.milvus
    secrets = {name: Secret.from_token(milvus[name]) if milvus[name] else env_secret(name) for name in CREDENTIAL_ENV}
    auth = MilvusAuth(**secrets, secure=bool(milvus.secure), server_pem_path=milvus.server_pem_path)
    try:
        return KnowledgeStore(**store_parameters(cfg), auth=auth)
    except ParameterError as exc:  # its parameters are the `milvus.*` keys of the same names
        raise ConfigError(exc.rename(f"milvus.{exc.parameter}")) from exc
