"""
Fixtures of the integration tests: for the server tests, one factory indexing the sample
knowledge base into a Milvus server (the 2.3 standalone or the Lite gRPC server) and what they
compare. The sample knowledge base indexed in a child process for the serving tests
(`served_index`) is in tests/conftest.py, beside the session's `sample_cfg` that copies it.
"""

import pytest

from tests.conftest import SHARED_SERVER_TIMEOUT

# --- the sample KB on a Milvus server: the standalone 2.3 server and the Lite gRPC server alike ---

# Lookups the server tests compare with the same KB in the Milvus Lite file.
SERVER_QUERIES = [
    "disk almost full on a worker node",
    "the postgres replica is falling behind the primary",
    "how do I find a runaway process eating all the CPU",
    "certificate expires soon on the ingress",
    "how do I bake sourdough bread",
]


def server_overrides(server, full_text: bool = False) -> list[str]:
    """
    A Milvus server with the Lite file's exact (FLAT) index, so that results compare; `full_text`
    adds the BM25 function (the Lite server has it, the 2.3 standalone server does not).
    """
    overrides = ["milvus=server", f"milvus.uri={server.uri}", "milvus.index_type=FLAT", SHARED_SERVER_TIMEOUT]
    return [*overrides, "milvus.full_text=true"] if full_text else overrides


def evidence(result) -> list[tuple[str, float]]:
    return [(block.evidence_key, block.score) for block in result.evidence_blocks]


@pytest.fixture(scope="session")
def indexed_server_cfg(tmp_path_factory):
    """
    indexed_server_cfg(server, full_text=False): a config of the sample KB indexed (rebuilt) into
    `server` with `server_overrides`, in a state folder of its own. The fixture factory of the
    server test modules, each of which keeps its config in a module fixture.
    """
    from pipelines.config.settings import load_config
    from pipelines.indexing import run_indexing
    from tests.conftest import SAMPLE_KB, state_overrides

    def make(server, full_text: bool = False):
        state = tmp_path_factory.mktemp("server-state")
        cfg = load_config(state_overrides(state, f"kb.path={SAMPLE_KB}", *server_overrides(server, full_text)))
        run_indexing(cfg, rebuild=True)
        return cfg

    return make
