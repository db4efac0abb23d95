"""
`knowledge serve` over HTTP, against a real server process on a free loopback port: results and
trace rows, every refusal (422, 413, 401, 404), health, 8 concurrent clients, `lookup --url`, and
the start-up refusals (off loopback without a key, nothing indexed).
"""

import json
import sqlite3
from datetime import datetime

import httpx
import pytest

from tests.helpers import child_env, cli_command, run_cli
from tests.integration.serving_helpers import concurrent_lookups, copy_state, free_port, running

API_KEY = "test-key-5f1c9a"  # not a secret: a throwaway key of this test server
AUTH = {"Authorization": f"Bearer {API_KEY}"}
MAX_CONCURRENT = 2
ALLOWED_ORIGIN = "http://tool.example"
EXTRA_HOST = "kb.internal"  # answered on any port (a proxy in front)
EXTRA_HOST_ON_PORT = "kb-direct.internal:8443"  # on that port only


@pytest.fixture(scope="module")
def server(served_index, tmp_path_factory):
    """One REST server for the module (start-up loads the model): key set, overlong queries rejected."""
    state = copy_state(served_index, tmp_path_factory, "rest")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = state.parent / "server.log"
    command = cli_command("serve", "--port", str(port))
    command += [f"paths.state_dir={state}", "mlflow=off", "query.on_overlong=error", "query.max_chars=300"]
    command += [f"serve.max_concurrent_lookups={MAX_CONCURRENT}", f"serve.cors_origins=[{ALLOWED_ORIGIN}]"]
    command.append(f"serve.allowed_hosts=[{EXTRA_HOST},{EXTRA_HOST_ON_PORT}]")
    with running(command, f"{url}/health", log_path, child_env(KNOWLEDGE_API_KEY=API_KEY)):
        yield {"url": url, "state": state, "log": log_path}


def run(server, body, headers=AUTH, **kwargs) -> httpx.Response:
    if body is not None:
        kwargs["json"] = body
    return httpx.post(f"{server['url']}/lookup_knowledge/run", headers=headers, timeout=60.0, **kwargs)


def trace_rows(state, where: str = "", params=()) -> list[tuple]:
    with sqlite3.connect(state / "traces.db") as connection:
        return connection.execute(
            f"SELECT id, status, found, arguments FROM tool_invocation {where}", params
        ).fetchall()


def test_lookup_returns_the_evidence_first_result_and_its_trace_row(server):
    response = run(server, {"query": "disk almost full on a worker node"})
    assert response.status_code == 200
    result = response.json()
    assert result["found"] is True and result["evidenceStatus"] == "evidence"
    assert result["evidenceBlocks"][0]["source"].startswith("disk/")
    assert {"contextPack", "retrievalTrace", "queryTransform", "invocationId"} <= set(result)
    assert "message" not in result  # absent keys stay absent, as in `knowledge lookup`
    rows = trace_rows(server["state"], "WHERE id = ?", (result["invocationId"],))
    assert [row[1:3] for row in rows] == [("ok", 1)]


def test_found_false_is_a_success(server):
    response = run(server, {"query": "chocolate cake recipe with vanilla frosting"})
    assert response.status_code == 200
    result = response.json()
    assert result["found"] is False and result["message"]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "missing_query"),
        ({"query": ""}, "invalid_query"),
        ({"query": " \t\n "}, "invalid_query"),
        ({"query": 42}, "invalid_query"),
        ({"query": ["disk full"]}, "invalid_query"),
        ({"query": None}, "invalid_query"),
        ({"query": "disk full", "top_k": 3}, "unknown_field"),
        (["disk full"], "invalid_body"),
    ],
)
def test_bad_request_bodies_get_422_with_a_reason(server, body, error):
    response = run(server, body)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"] == error and response.json()["detail"]


@pytest.mark.parametrize("query", ["", " \t\n "])
def test_an_empty_query_gets_422_and_leaves_its_trace_row(server, query):
    before = len(trace_rows(server["state"], "WHERE status = 'error'"))
    response = run(server, {"query": query})
    assert response.status_code == 422
    assert response.json() == {
        "error": "invalid_query",
        "detail": "query is empty: give the question or alert text to look up",
    }
    assert len(trace_rows(server["state"], "WHERE status = 'error'")) == before + 1


def test_a_body_that_is_not_json_gets_422(server):
    response = run(server, None, headers={**AUTH, "Content-Type": "application/json"}, content=b"query=disk")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_json"


def test_an_overlong_query_is_rejected_with_its_trace_row(server):
    before = len(trace_rows(server["state"], "WHERE status = 'error'"))
    response = run(server, {"query": "disk full " * 40})
    assert response.status_code == 422
    assert "300" in response.json()["detail"]
    assert len(trace_rows(server["state"], "WHERE status = 'error'")) == before + 1


def test_a_body_over_the_limit_gets_413(server):
    response = run(server, {"query": "disk " * 5000})
    assert response.status_code == 413
    assert response.json()["error"] == "body_too_large"


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-key"}, {"Authorization": API_KEY}, {"Authorization": f"Basic {API_KEY}"}],
)
def test_requests_without_the_key_get_401(server, headers):
    response = run(server, {"query": "disk full"}, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert API_KEY not in response.text


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
def test_the_auth_scheme_is_case_insensitive(server, scheme):
    response = run(server, {"query": "disk full"}, headers={"Authorization": f"{scheme} {API_KEY}"})
    assert response.status_code == 200


def test_only_a_listed_origin_gets_a_cors_grant(server):
    def preflight(origin: str) -> httpx.Response:
        headers = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        return httpx.options(f"{server['url']}/lookup_knowledge/run", headers=headers)

    granted = preflight(ALLOWED_ORIGIN)  # no key: browsers send none with a preflight
    assert granted.status_code == 200
    assert granted.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    refused = preflight("http://evil.example")
    assert "access-control-allow-origin" not in refused.headers
    posted = run(server, {"query": "disk full"}, headers={**AUTH, "Origin": "http://evil.example"})
    assert posted.status_code == 403 and "access-control-allow-origin" not in posted.headers
    listed = run(server, {"query": "disk full"}, headers={**AUTH, "Origin": ALLOWED_ORIGIN})
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == ALLOWED_ORIGIN


@pytest.mark.parametrize(
    ("host", "status"),
    [
        (EXTRA_HOST, 200),
        (f"{EXTRA_HOST}:443", 200),
        (EXTRA_HOST_ON_PORT, 200),
        ("kb-direct.internal:9000", 403),
        ("evil.example", 403),
    ],
)
def test_a_configured_host_is_served_and_others_refused(server, host, status):
    response = run(server, {"query": "disk full"}, headers={**AUTH, "Host": host})
    assert response.status_code == status, response.text
    if status == 403:
        assert response.json()["error"] == "forbidden_host" and "serve.allowed_hosts" in response.json()["detail"]
    from_its_page = run(server, {"query": "disk full"}, headers={**AUTH, "Host": host, "Origin": f"https://{host}"})
    assert from_its_page.status_code == status  # the page of a configured host is that server's own


def test_every_origin_together_with_a_key_is_refused_at_start_up(tmp_path):
    done = run_cli(
        "serve", f"paths.state_dir={tmp_path}", "mlflow=off", "serve.cors_origins=[*]", KNOWLEDGE_API_KEY="k1"
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert 'refusing serve.cors_origins=["*"] with an API key' in done.stderr


def test_deploy_routes_are_not_served(server):
    response = httpx.post(f"{server['url']}/deploy-yaml", json={"name": "x", "source_code": "{}"}, headers=AUTH)
    assert response.status_code == 404


def test_health_reports_the_stores_and_the_config_without_the_key(server):
    response = httpx.get(f"{server['url']}/health", timeout=30.0)  # open without a key
    assert response.status_code == 200
    report = response.json()
    assert report["status"] == "ok"
    assert report["checks"]["vectorStore"]["ok"] and report["checks"]["vectorStore"]["rows"] > 0
    assert report["checks"]["l0Index"]["documents"] == 36
    assert report["checks"]["traceStore"]["ok"]
    config = report["config"]
    assert config["collection"] == "knowledge" and config["vectorStoreMode"] == "sdk"
    assert config["thresholds"]["evidence"] == 0.35 and config["auth"] is True
    assert config["maxConcurrentLookups"] == MAX_CONCURRENT
    assert API_KEY not in response.text


def feedback(server, body, headers=AUTH) -> httpx.Response:
    return httpx.post(f"{server['url']}/lookup_knowledge/feedback", json=body, headers=headers, timeout=60.0)


def label_rows(state, invocation_id: str) -> list[tuple]:
    with sqlite3.connect(state / "traces.db") as connection:
        return connection.execute(
            "SELECT verdict, sources, reviewer, origin FROM lookup_label WHERE invocation_id = ? ORDER BY created_at",
            (invocation_id,),
        ).fetchall()


def test_feedback_on_a_lookup_is_one_label_each_call(server):
    invocation_id = run(server, {"query": "disk almost full on a worker node"}).json()["invocationId"]
    helped = feedback(server, {"invocationId": invocation_id, "useful": True})
    assert helped.status_code == 200, helped.text
    assert helped.json()["verdict"] == "useful" and helped.json()["traceStatus"] == "recorded"
    top = helped.json()["sources"]
    assert top and top[0].startswith("disk/")  # no source named: the lookup's best one helped
    missed = feedback(server, {"invocationId": invocation_id, "useful": False, "source": "disk/inode-exhaustion.md"})
    assert missed.status_code == 200 and missed.json()["sources"] == ["disk/inode-exhaustion.md"]
    assert label_rows(server["state"], invocation_id) == [
        ("useful", json.dumps(top), "agent", "rest"),
        ("not_useful", json.dumps(["disk/inode-exhaustion.md"]), "agent", "rest"),
    ]


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"invocationId": "00000000-nope", "useful": True}, 404, "no invocation '00000000-nope'"),
        ({"invocationId": "{id}", "useful": True, "source": "disk/nope.md"}, 422, "not in the index"),
        ({"invocationId": "{id}"}, 422, "useful: Field required"),
        ({"invocationId": "{id}", "useful": "yes"}, 422, "useful: Input should be a valid boolean"),
        ({"invocationId": "{id}", "useful": True, "why": "x"}, 422, "why: Extra inputs are not permitted"),
    ],
)
def test_bad_feedback_gets_a_reason_and_stores_nothing(server, body, status, reason):
    invocation_id = run(server, {"query": "pg replica lag"}).json()["invocationId"]
    body = {key: value.format(id=invocation_id) if isinstance(value, str) else value for key, value in body.items()}
    response = feedback(server, body)
    assert response.status_code == status and reason in response.json()["detail"]
    assert label_rows(server["state"], invocation_id) == []


def test_feedback_without_the_key_gets_401(server):
    assert feedback(server, {"invocationId": "x", "useful": True}, headers={}).status_code == 401


def test_openapi_describes_request_and_response_models(server):
    schema = httpx.get(f"{server['url']}/openapi.json", headers=AUTH).json()
    operation = schema["paths"]["/lookup_knowledge/run"]["post"]
    assert "requestBody" in operation
    components = schema["components"]["schemas"]
    assert components["lookup_knowledgeRunRequest"]["required"] == ["query"]
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer["$ref"].endswith("/LookupResponse")  # the result itself, no envelope
    assert {"found", "evidenceBlocks", "invocationId"} <= set(components["LookupResponse"]["properties"])
    assert components["LookupResponse"]["properties"]["evidenceBlocks"]["items"]["$ref"].endswith("/EvidenceBlockModel")


# The one key that differs between two calls of the same query: the call's own trace row id.
PER_CALL_KEYS = {"invocationId"}


def without_per_call_keys(value):
    if isinstance(value, dict):
        return {k: without_per_call_keys(v) for k, v in value.items() if k not in PER_CALL_KEYS}
    if isinstance(value, list):
        return [without_per_call_keys(v) for v in value]
    return value


def test_the_served_body_is_exactly_what_knowledge_lookup_prints(server, served_index, tmp_path_factory):
    query = "disk almost full on a worker node"
    served = run(server, {"query": query})
    assert served.status_code == 200
    body = served.json()
    assert "result" not in body and body["found"] is True  # the result at the top level
    # `knowledge lookup` with the server's config, on its own copy of the index (the server holds its db).
    state = copy_state(served_index, tmp_path_factory, "cli-lookup")
    local = run_cli(
        "lookup",
        "--compact",
        query,
        f"paths.state_dir={state}",
        "mlflow=off",
        "query.on_overlong=error",
        "query.max_chars=300",
    )
    assert local.returncode == 0, local.stderr
    printed = json.loads(local.stdout)
    assert list(body) == list(printed)  # same keys, same order
    assert without_per_call_keys(body) == without_per_call_keys(printed)


def test_eight_concurrent_clients_get_independent_results_and_one_row_each(server):
    before = len(trace_rows(server["state"]))
    answers = concurrent_lookups(server["url"], headers=AUTH)
    assert len(answers) == 200
    assert all(status == 200 for _, status, _ in answers), [a for a in answers if a[1] != 200][:1]
    assert all(body["queryTransform"]["raw"] == query for query, _, body in answers)
    ids = {body["invocationId"] for _, _, body in answers}
    assert len(ids) == 200
    assert len(trace_rows(server["state"])) == before + 200
    recorded = {row[0]: json.loads(row[3])["query"] for row in trace_rows(server["state"])}
    assert all(recorded[body["invocationId"]] == query for query, _, body in answers)
    # Eight clients, but never more than serve.max_concurrent_lookups pipeline runs at once.
    assert most_lookups_at_once(server["state"], ids) == MAX_CONCURRENT


def most_lookups_at_once(state, ids: set[str]) -> int:
    """The most lookups whose [start, start + latency] intervals overlap, from their trace rows."""
    with sqlite3.connect(state / "traces.db") as connection:
        rows = connection.execute("SELECT id, created_at, latency_ms FROM tool_invocation").fetchall()
    events = []
    for key, created, latency in rows:
        if key in ids:
            start = datetime.fromisoformat(created).timestamp()
            events += [(start + latency / 1000.0, -1), (start, 1)]  # an end sorts before a start at the same time
    running_now = most = 0
    for _, change in sorted(events):
        running_now += change
        most = max(most, running_now)
    return most


def test_lookup_url_asks_the_server_and_a_local_lookup_says_what_to_do(server):
    remote = run_cli(
        "lookup", "--url", server["url"], "--compact", "disk almost full", timeout=120, KNOWLEDGE_API_KEY=API_KEY
    )
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout)["found"] is True
    local = run_cli("lookup", "disk almost full", f"paths.state_dir={server['state']}", "mlflow=off")
    assert local.returncode == 1
    assert "held by another process" in local.stderr and "--url" in local.stderr


def test_the_key_never_reaches_the_log_or_the_trace_rows(server):
    assert API_KEY not in server["log"].read_text(errors="replace")
    assert not [row for row in trace_rows(server["state"]) if API_KEY in str(row)]


def test_serving_off_loopback_without_a_key_is_refused_before_binding(tmp_path):
    done = run_cli("serve", "--host", "0.0.0.0", f"paths.state_dir={tmp_path}", "mlflow=off", timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "refusing to serve on 0.0.0.0 without an API key" in done.stderr


def test_serving_with_nothing_indexed_fails_fast_and_says_what_to_do(tmp_path):
    done = run_cli("serve", "--port", str(free_port()), f"paths.state_dir={tmp_path}", "mlflow=off")
    assert done.returncode == 2
    assert "run `knowledge index` first" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_pipeline_failure_gives_503_with_its_trace_row_and_the_server_recovers(server):
    index_file = server["state"] / "knowledge.l0.json"
    moved = index_file.with_suffix(".json.away")
    index_file.rename(moved)
    try:
        failed = run(server, {"query": "disk almost full"})
        health = httpx.get(f"{server['url']}/health", timeout=30.0)
    finally:
        moved.rename(index_file)
    assert failed.status_code == 503
    body = failed.json()
    assert body["evidenceStatus"] == "error" and body["found"] is False and body["error"]["type"]
    assert "Traceback" not in failed.text
    assert [row[1] for row in trace_rows(server["state"], "WHERE id = ?", (body["invocationId"],))] == ["error"]
    assert health.status_code == 503 and health.json()["checks"]["l0Index"]["ok"] is False
    again = run(server, {"query": "disk almost full"})
    assert again.status_code == 200 and again.json()["found"] is True
    assert httpx.get(f"{server['url']}/health", timeout=30.0).status_code == 200
