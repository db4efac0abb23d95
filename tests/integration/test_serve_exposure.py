"""
What a default `knowledge serve` exposes beyond its lookup clients, against a real keyless server
process on loopback: no web page of another origin may read a lookup (no CORS grant by default),
refusals keep the documented JSON shape, OpenAPI lists only routes that answer, a stalled client
body is cut off, and start-up refuses a busy port or a blank key before loading anything.
"""

import json
import re
import socket
import time

import httpx
import pytest

from tests.helpers import REPO, child_env, cli_command, run_cli
from tests.integration.serving_helpers import copy_state, free_port, running

EVIL = "http://evil.example"
READ_TIMEOUT_S = 1


@pytest.fixture(scope="module")
def default_server(served_index, tmp_path_factory):
    """A REST server with the default serve config: no key, no CORS allow-list."""
    state = copy_state(served_index, tmp_path_factory, "exposure")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = cli_command("serve", "--port", str(port), f"paths.state_dir={state}", "mlflow=off")
    command.append(f"serve.read_timeout_s={READ_TIMEOUT_S}")
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


def test_a_lookup_posted_from_another_origin_is_refused(default_server):
    response = httpx.post(
        f"{default_server}/lookup_knowledge/run", json={"query": "disk full"}, headers={"Origin": EVIL}, timeout=60.0
    )
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden_origin" and "serve.allowed_origins" in response.json()["detail"]
    assert "access-control-allow-origin" not in response.headers


def test_a_rebinding_page_gets_403_for_its_host_and_its_origin(default_server):
    """A page of evil.example re-pointed at 127.0.0.1 sends its own name in Host and Origin."""
    port = default_server.rsplit(":", 1)[1]
    url = f"{default_server}/lookup_knowledge/run"
    rebound = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
    for headers in (rebound, {"Host": rebound["Host"]}, {"Origin": rebound["Origin"]}):
        response = httpx.post(url, json={"query": "disk full"}, headers=headers, timeout=60.0)
        assert response.status_code == 403, headers
        assert response.json()["error"] in ("forbidden_host", "forbidden_origin")
        assert "evidenceBlocks" not in response.text
    health = httpx.get(f"{default_server}/health", headers={"Host": rebound["Host"]})
    assert health.status_code == 403 and health.json()["error"] == "forbidden_host"


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "[::1]", "LocalHost"])
def test_loopback_names_without_an_origin_or_with_the_servers_own_are_served(default_server, name):
    port = default_server.rsplit(":", 1)[1]
    url = f"{default_server}/lookup_knowledge/run"
    for headers in ({"Host": f"{name}:{port}"}, {"Host": f"{name}:{port}", "Origin": f"http://{name}:{port}"}):
        response = httpx.post(url, json={"query": "disk full"}, headers=headers, timeout=60.0)
        assert response.status_code == 200, (headers, response.text)
    other_port = httpx.get(f"{default_server}/health", headers={"Host": f"{name}:1"})
    assert other_port.status_code == 403  # a loopback name on another port is another server


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_json_body_not_sent_as_json_gets_the_documented_422(default_server, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    body = json.dumps({"query": "disk full"}).encode()
    response = httpx.post(f"{default_server}/lookup_knowledge/run", content=body, headers=headers)
    if content_type is None:
        assert "content-type" not in response.request.headers
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_content_type"
    assert "disk full" not in response.text  # the body is not echoed back


def test_a_deeply_nested_body_gets_422_not_500(default_server):
    body = b"[" * 5000 + b"]" * 5000
    response = httpx.post(
        f"{default_server}/lookup_knowledge/run", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_json" and "nested" in response.json()["detail"]


def test_a_client_that_stops_mid_body_gets_408(default_server):
    host, port = default_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as client:
        started = time.monotonic()
        client.sendall(
            f"POST /lookup_knowledge/run HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n".encode()
            + b'Content-Length: 100\r\n\r\n{"query": '
        )
        answer, answered_after = b"", None
        while chunk := client.recv(4096):  # until the server closes the connection
            answer += chunk
            answered_after = answered_after or time.monotonic() - started
        closed_after = time.monotonic() - started
        answer = answer.decode()
    assert answer.startswith("HTTP/1.1 408")
    assert '"error": "body_timeout"' in answer
    # Closed with the answer, not after uvicorn's keep-alive wait (the next request's header deadline here).
    assert "connection: close" in answer.lower().split("\r\n\r\n", 1)[0]
    assert closed_after - answered_after < READ_TIMEOUT_S / 2, (answered_after, closed_after)


@pytest.mark.parametrize(
    "path", ["/draw/lookup_knowledge", "/v1/models", "/v1/chat/completions", "/traces", "/nosuch", "/status/nosuch"]
)
def test_routes_that_cannot_answer_are_not_served(default_server, path):
    response = httpx.request("POST" if "chat" in path else "GET", f"{default_server}{path}", json={})
    assert response.status_code == 404
    # One shape for every unknown path: the guard's, the routing's and hayhooks' own 404 alike.
    assert set(response.json()) == {"error", "detail"} and response.json()["error"] == "not_found"


def test_openapi_lists_only_the_routes_that_answer(default_server):
    paths = set(httpx.get(f"{default_server}/openapi.json").json()["paths"])
    assert httpx.get(f"{default_server}/status/lookup_knowledge").status_code == 200
    assert httpx.get(f"{default_server}/status").json()["pipelines"] == ["lookup_knowledge"]
    for doc in ("docs/reliability.md", "docs/serving.md"):  # the docs name exactly the routes served
        row = next(
            line for line in (REPO / doc).read_text(encoding="utf-8").splitlines() if "OpenAPI lists only" in line
        )
        assert set(re.findall(r"`(/[^`]*)`", row.split("OpenAPI lists only", 1)[1])) == paths, (doc, row)


def test_the_docs_page_loads_swagger_ui_from_the_server_itself(default_server):
    pytest.importorskip("swagger_ui_bundle", reason="swagger-ui-bundle-v2 (a dependency) is not installed")
    page = httpx.get(f"{default_server}/docs")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    # Every script, style sheet, icon and the schema: on this server, none from a CDN.
    urls = re.findall(r'(?:src|href)="([^"]+)"', page.text) + re.findall(r"url: '([^']+)'", page.text)
    assert len(urls) >= 4 and all(url.startswith("/") for url in urls), urls
    for url in urls:
        assert httpx.get(f"{default_server}{url}").status_code == 200, url
    assert httpx.get(f"{default_server}/redoc").status_code == 404  # ReDoc has no packaged copy: not served


def test_serving_on_a_busy_port_exits_2_before_loading(default_server, tmp_path):
    port = default_server.rsplit(":", 1)[1]
    done = run_cli("serve", "--port", port, f"paths.state_dir={tmp_path}", "mlflow=off", timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert f"cannot serve on 127.0.0.1:{port}" in done.stderr


@pytest.mark.parametrize("key", [" ", "\t "])
def test_a_blank_key_is_refused_off_loopback_like_no_key(key, tmp_path):
    done = run_cli("serve", "--host", "0.0.0.0", f"paths.state_dir={tmp_path}", "mlflow=off", KNOWLEDGE_API_KEY=key)
    assert done.returncode == 2
    assert "refusing to serve on 0.0.0.0 without an API key" in done.stderr


def test_the_agent_view_is_the_packed_context_with_citations(default_server):
    url = f"{default_server}/lookup_knowledge/run"
    full = httpx.post(url, json={"query": "disk almost full"}, timeout=60.0).json()
    slim = httpx.post(url, params={"view": "agent"}, json={"query": "disk almost full"}, timeout=60.0)
    assert slim.status_code == 200
    view = slim.json()
    assert view["found"] is True and view["context"] == full["contextPack"]["text"]
    assert [c["source"] for c in view["citations"]] == [b["source"] for b in full["evidenceBlocks"]]
    assert not {"retrievalTrace", "rerankTrace", "evidenceBlocks"} & set(view)
    assert len(slim.content) < len(json.dumps(full))


def test_an_unknown_view_gets_the_documented_422(default_server):
    response = httpx.post(
        f"{default_server}/lookup_knowledge/run", params={"view": "tiny"}, json={"query": "disk full"}, timeout=60.0
    )
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_request" and "view" in response.json()["detail"]


def test_a_slow_but_steady_body_is_served(default_server):
    """serve.read_timeout_s bounds a pause between reads, not the whole body."""
    host, port = default_server.removeprefix("http://").split(":")
    body = json.dumps({"query": "disk almost full"}).encode()
    pieces = [body[i : i + 4] for i in range(0, len(body), 4)]
    pause = READ_TIMEOUT_S * 1.5 / len(pieces)  # the body takes 1.5 x the timeout, no pause near it
    with socket.create_connection((host, int(port)), timeout=120) as client:
        client.sendall(
            f"POST /lookup_knowledge/run HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n".encode()
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        )
        for piece in pieces:
            time.sleep(pause)
            client.sendall(piece)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_headers_that_never_finish_get_408_and_the_connection_closed(default_server):
    host, port = default_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=READ_TIMEOUT_S * 6) as client:
        client.sendall(f"POST /lookup_knowledge/run HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())  # and nothing more
        answer = b""
        while chunk := client.recv(4096):  # until the server closes (a socket timeout fails the test)
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408") and b'"error": "header_timeout"' in answer


@pytest.mark.parametrize(("value", "shown"), [("0", "0.0"), ("-1", "-1.0"), ("nan", "nan"), ("-inf", "-inf")])
def test_a_read_timeout_that_is_not_positive_is_refused(value, shown, tmp_path):
    result = run_cli("serve", f"paths.state_dir={tmp_path}", "mlflow=off", f"serve.read_timeout_s={value}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"knowledge: error: serve.read_timeout_s={shown} must be more than 0 (seconds)"
    ]


@pytest.mark.parametrize("key", ["serve.read_timeout_s", "serve.health_timeout_s"])
def test_an_endless_timeout_is_refused(key, tmp_path):
    result = run_cli("serve", f"paths.state_dir={tmp_path}", "mlflow=off", f"{key}=inf")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"knowledge: error: {key}=inf must be a finite number of seconds"]


@pytest.mark.parametrize(
    ("override", "shown"),
    [
        ("serve.allowed_hosts=[http://kb.internal]", "serve.allowed_hosts"),
        ("serve.allowed_origins=[kb]", "serve.allowed_origins"),
    ],
)
def test_an_allow_list_entry_that_names_nothing_is_refused(override, shown, tmp_path):
    result = run_cli("serve", f"paths.state_dir={tmp_path}", "mlflow=off", override)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"knowledge: error: {shown}: ")
