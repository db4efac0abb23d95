"""
What a default `knowledge serve` exposes beyond its lookup clients, against a real keyless server
process on loopback: no web page of another origin may read a lookup (no CORS grant by default).
"""

import httpx
import pytest

from tests.helpers import child_env, cli_command
from tests.integration.serving_helpers import copy_state, free_port, running

EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def default_server(served_index, tmp_path_factory):
    """A REST server with the default serve config: no key, no CORS allow-list."""
    state = copy_state(served_index, tmp_path_factory, "exposure")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = cli_command("serve", "--port", str(port), f"paths.state_dir={state}", "mlflow=off")
    with running(command, f"{url}/health", state.parent / "server.log", child_env()):
        yield url


def test_a_preflight_from_another_origin_is_not_granted(default_server):
    response = httpx.options(
        f"{default_server}/lookup_knowledge/run",
        headers={
            "Origin": EVIL,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert response.status_code >= 400
    assert "access-control-allow-origin" not in response.headers


def test_a_lookup_posted_from_another_origin_carries_no_grant(default_server):
    response = httpx.post(
        f"{default_server}/lookup_knowledge/run", json={"query": "disk full"}, headers={"Origin": EVIL}, timeout=60.0
    )
    assert response.status_code == 200  # answered, but a browser keeps the body from the page
    assert "access-control-allow-origin" not in response.headers
    assert "access-control-allow-credentials" not in response.headers
