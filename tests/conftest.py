"""
Shared fixtures: the config is composed once per session with test overrides, the embedding
model loads once (sentence-transformers backends are cached per process), and the sample and
runbook collections are indexed once per session. Tests that write get their own tmp paths.
"""

import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import pytest

from pipelines.config.settings import load_config

REPO = Path(__file__).resolve().parent.parent
SAMPLE_KB = REPO / "knowledge"
RUNBOOKS = REPO.parent / "shared" / "corpus" / "prometheus-runbooks"
EVAL_DIR = REPO / "eval"


def state_overrides(state_dir: Path, *extra: str) -> list[str]:
    """Overrides that keep every file a test writes under `state_dir`, with MLflow off unless asked."""
    return [f"paths.state_dir={state_dir}", "mlflow=off", *extra]


@pytest.fixture
def make_config(tmp_path):
    """Compose the config for one test, its state under the test's own tmp folder."""

    def _make(*overrides: str, state_dir: Path | None = None):
        return load_config(state_overrides(state_dir or tmp_path / "state", *overrides))

    return _make


@pytest.fixture
def small_kb(tmp_path) -> Path:
    """A copy of a few sample runbooks that a test may change freely."""
    kb = tmp_path / "kb"
    for source in [
        "disk/disk-full.md",
        "disk/inode-exhaustion.md",
        "database/postgresql-replication-lag.md",
        "cpu/runaway-process.md",
    ]:
        target = kb / source
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_KB / source, target)
    return kb


@pytest.fixture
def index_kb(make_config):
    """Index a knowledge base into the test's own state folder: returns (cfg, report)."""
    from pipelines.indexing import run_indexing

    def _index(kb: Path, *overrides: str, rebuild: bool = False):
        cfg = make_config(f"kb.path={kb}", *overrides)
        return cfg, run_indexing(cfg, rebuild=rebuild)

    return _index


@pytest.fixture(scope="session")
def served_index(tmp_path_factory) -> Path:
    """
    A state folder with knowledge/ indexed into it (Milvus Lite db, L0 index), mlflow off, by
    `knowledge index` in a child process: this process never opens (and locks) its db, so the
    servers and CLI children of the tests can use copies of it.
    """
    from tests.helpers import run_cli

    state = tmp_path_factory.mktemp("served-index") / "state"
    done = run_cli("index", "--kb", str(SAMPLE_KB), f"paths.state_dir={state}", "mlflow=off", timeout=900)
    assert done.returncode == 0, done.stderr
    return state


@pytest.fixture(scope="session")
def sample_cfg(tmp_path_factory, served_index):
    """The bundled knowledge/ indexed once per session: a copy of `served_index` that this process opens."""
    state = tmp_path_factory.mktemp("sample-state")
    shutil.copytree(served_index, state, dirs_exist_ok=True)
    return load_config(state_overrides(state, f"kb.path={SAMPLE_KB}"))


@pytest.fixture(scope="session")
def sample_service(sample_cfg):
    from pipelines.lookup import LookupService

    service = LookupService(sample_cfg)
    service.warm_up()
    return service


@pytest.fixture(scope="session")
def runbooks_dir() -> Path:
    if not RUNBOOKS.is_dir():
        pytest.skip(f"runbook corpus not found at {RUNBOOKS}")
    return RUNBOOKS


@pytest.fixture(scope="session")
def runbooks_cfg(tmp_path_factory, runbooks_dir):
    """The prometheus runbook corpus indexed once per session (with its report)."""
    from pipelines.indexing import run_indexing

    state = tmp_path_factory.mktemp("runbooks-state")
    cfg = load_config(state_overrides(state, f"kb.path={runbooks_dir}"))
    report = run_indexing(cfg, rebuild=True)
    cfg_report = (cfg, report)
    return cfg_report


@pytest.fixture(scope="session")
def topics_cfg(tmp_path_factory):
    """The purpose-made two-topic knowledge base (tests/lookup_kbs.py) indexed once per session."""
    from pipelines.indexing import run_indexing
    from tests.lookup_kbs import write_two_topic_kb

    root = tmp_path_factory.mktemp("topics")
    kb = write_two_topic_kb(root / "kb")
    cfg = load_config(state_overrides(root / "state", f"kb.path={kb}"))
    run_indexing(cfg, rebuild=True)
    return cfg


# --- trace store / TraceWriter fixtures -----------------------------------------------------------

PG_URL = os.environ.get("KNOWLEDGE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def pg_url() -> str:
    """The real PostgreSQL of the test machine; skipped with the reason when it is absent (CI requires it)."""
    import psycopg

    try:
        with psycopg.connect(PG_URL.replace("postgresql+psycopg://", "postgresql://"), connect_timeout=3):
            pass
    except Exception as exc:  # any failure to connect means "no PostgreSQL here"
        reason = (
            f"PostgreSQL not reachable at {PG_URL}: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc}"
        )
        if os.environ.get("KNOWLEDGE_REQUIRE_POSTGRES"):
            pytest.fail(f"{reason} (KNOWLEDGE_REQUIRE_POSTGRES is set)")
        pytest.skip(reason)
    return PG_URL


@pytest.fixture
def pg_schema_url(pg_url):
    """A PostgreSQL URL whose search_path is a fresh schema, dropped after the test."""
    yield from _pg_schema(pg_url)


@pytest.fixture(scope="module")
def pg_module_schema_url(pg_url):
    yield from _pg_schema(pg_url)


def _pg_schema(pg_url: str):
    import uuid

    import psycopg

    schema = f"lk_test_{uuid.uuid4().hex[:12]}"
    plain = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{pg_url}?options=-csearch_path%3D{schema}"
    finally:
        from components.tracing.trace_database import dispose_engines

        dispose_engines()
        with psycopg.connect(plain, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def sample_overrides(sample_cfg, *extra: str) -> list[str]:
    """Overrides that point a new config at the session's indexed sample collection."""
    return [
        f"milvus.uri={sample_cfg.milvus.uri}",
        f"l0.index_path={sample_cfg.l0.index_path}",
        "trace.retry_interval_s=0",
        *extra,
    ]


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory) -> str:
    """One MLflow sqlite store for the session: its migrations run once, here (they take seconds)."""
    from mlflow import MlflowClient

    folder = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{folder}/mlflow.db"
    MlflowClient(uri).search_experiments()
    return uri


# --- a real Milvus server (PyPI `milvus`, standalone) ---------------------------------------------

# The session's servers share two cores with the other worker's tests, one of which restarts a
# Milvus standalone: while it boots, a connection to the Lite server was measured to take up to
# 4.9 s on an idle machine, and went over the 10 s default under the full suite. Tests of results,
# not of timeouts, connect with this limit.
SHARED_SERVER_TIMEOUT = "milvus.timeout_ms=60000"


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory):
    """One Milvus standalone server per session on a free loopback port, always stopped afterwards."""
    from pipelines.dev.milvus_server import MilvusServerProcess, MilvusServerUnavailableError

    server = MilvusServerProcess(tmp_path_factory.mktemp("milvus-server"))
    try:
        server.start()
    except MilvusServerUnavailableError as exc:
        if os.environ.get("KNOWLEDGE_REQUIRE_MILVUS_SERVER"):
            pytest.fail(f"{exc} (KNOWLEDGE_REQUIRE_MILVUS_SERVER is set)")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def lite_server(tmp_path_factory):
    """One Milvus Lite gRPC server (BM25 functions included) per session on a free loopback port, always stopped."""
    from pipelines.dev.lite_server import LiteServerProcess

    server = LiteServerProcess(tmp_path_factory.mktemp("lite-server")).start()
    try:
        yield server
    finally:
        server.stop()


# --- markers by place: unit tests mirror the source tree, the rest is integration --------------

SLOW_MODULES = {"test_runbooks_corpus.py", "test_bench.py", "test_notebooks.py", "test_guarded_tuning_runbooks.py"}


def pytest_collection_modifyitems(config, items):
    tests_root = Path(__file__).resolve().parent
    for item in items:
        parts = Path(item.fspath).resolve().relative_to(tests_root).parts
        item.add_marker(pytest.mark.unit if parts[0] == "components" else pytest.mark.integration)
        if parts[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
