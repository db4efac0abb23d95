"""
Faults of the trace store met from the outside: a query with a NUL byte on PostgreSQL, a trace
database that stops answering, spool records meant for another database, an outage warned
once, and failed lookups that keep what their earlier stages produced.
"""

import json
import threading

import pytest

from components.lookup.fallback_retriever import FallbackRetriever
from components.tracing.trace_store import TraceStore
from pipelines.cli import main
from pipelines.config.settings import load_config
from pipelines.lookup import LookupService
from tests.conftest import sample_overrides, state_overrides
from tests.integration.test_trace_failures import TcpProxy


@pytest.fixture
def config_for(sample_cfg, tmp_path):
    """config_for(db_url, *overrides): a config over the sample index with its own state folder."""

    def make(db_url: str, *overrides: str):
        return load_config(
            state_overrides(tmp_path / "state", *sample_overrides(sample_cfg, f"trace.db_url='{db_url}'", *overrides))
        )

    return make


@pytest.fixture
def paused_proxy():
    proxy = TcpProxy(("127.0.0.1", 5432))
    proxy.start()
    yield proxy
    proxy.stop()


def test_a_nul_byte_in_a_batch_query_blocks_no_postgres_record(config_for, pg_schema_url, sample_cfg, tmp_path, capsys):
    batch = tmp_path / "batch.txt"
    batch.write_text("certificate expiry\ndisk\x00full on /var\npg replica lag\n")
    overrides = state_overrides(tmp_path / "state", *sample_overrides(sample_cfg, f"trace.db_url='{pg_schema_url}'"))
    assert main(["lookup", "--batch", str(batch), "--compact", *overrides]) == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["traceStatus"] for r in results] == ["recorded"] * 3
    cfg = config_for(pg_schema_url)
    store = TraceStore(cfg.trace.db_url, cfg.trace.spool_path)
    assert store.spooled() == [] and store.count() == 3
    assert store.get(results[1]["invocationId"])["arguments"]["query"] == "disk\\u0000full on /var"
    assert main(["traces", "replay", *overrides]) == 0
    assert "replayed 0 spooled record(s)" in capsys.readouterr().out


def test_a_trace_database_that_stops_answering_costs_a_timeout_not_the_batch(config_for, pg_schema_url, paused_proxy):
    url = pg_schema_url.replace("@127.0.0.1:5432/", f"@127.0.0.1:{paused_proxy.port}/")
    service = LookupService(config_for(url, "trace.timeout_s=1", "trace.retry_interval_s=60"))
    assert service.lookup("certificate expiry").trace_status == "recorded"
    paused_proxy.pause()
    results: list = []
    worker = threading.Thread(
        target=lambda: results.extend(service.lookup(q) for q in ("disk full on /var", "pg replica lag")),
        daemon=True,
    )
    worker.start()
    worker.join(120)  # a guard against a hang, not a speed check
    assert not worker.is_alive(), "the lookup hung on a trace database that does not answer"
    assert [r.trace_status for r in results] == ["spooled", "spooled"]
    assert results[0].found
    store = service.trace_writer.store
    assert [r["id"] for r in store.spooled()] == [r.invocation_id for r in results]
    paused_proxy.resume()
    assert store.replay().inserted == 2
    assert store.count() == 3


def test_an_unreachable_trace_database_warns_once(config_for, tmp_path, caplog):
    (tmp_path / "blocked").write_text("a file where the database folder should be")
    service = LookupService(config_for(f"sqlite:///{tmp_path}/blocked/traces.db"))
    with caplog.at_level("WARNING"):
        results = [service.lookup(q) for q in ("certificate expiry", "disk full on /var")]
    assert [r.trace_status for r in results] == ["spooled", "spooled"]
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "trace database" in r.getMessage().lower()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


def test_a_record_spooled_for_one_database_is_not_replayed_into_another(config_for, tmp_path, capsys):
    (tmp_path / "blocked").write_text("")
    down = LookupService(config_for(f"sqlite:///{tmp_path}/blocked/traces.db"))
    spooled = down.lookup("certificate expiry")
    assert spooled.trace_status == "spooled"
    other_url = f"sqlite:///{tmp_path}/other.db"
    other = LookupService(config_for(other_url))
    assert other.lookup("disk full on /var").trace_status == "recorded"
    assert other.trace_writer.store.get(spooled.invocation_id) is None
    overrides = state_overrides(tmp_path / "state", f"trace.db_url='{other_url}'")
    assert main(["traces", "replay", *overrides]) == 0
    assert "1 record(s) for other trace databases kept" in capsys.readouterr().out
    (tmp_path / "blocked").unlink()
    own = state_overrides(tmp_path / "state", f"trace.db_url='sqlite:///{tmp_path}/blocked/traces.db'")
    assert main(["traces", "replay", *own]) == 0
    assert "replayed 1 spooled record(s)" in capsys.readouterr().out


def test_a_reranker_failure_keeps_the_earlier_stages_in_result_and_row(config_for, tmp_path, monkeypatch):
    service = LookupService(config_for(f"sqlite:///{tmp_path}/traces.db"))
    service.warm_up()

    def broken(**_kwargs):
        raise RuntimeError("weights exploded:\nthe second line says why")

    monkeypatch.setattr(service.pipeline.get_component("reranker"), "run", broken)
    result = service.lookup("pg replica lag")
    payload = result.to_dict()
    assert payload["evidenceStatus"] == "error" and payload["evidenceBlocks"] == []
    assert payload["error"]["message"] == "weights exploded: the second line says why"
    assert payload["l0Hints"]["entities"] == ["PostgreSQL"]
    assert payload["retrievalTrace"]["attempts"] and payload["queryTransform"]["raw"] == "pg replica lag"
    details = service.trace_writer.store.get(result.invocation_id)["retrieval_details"]
    assert details["l0_hints"]["entities"] == ["PostgreSQL"]
    assert details["retrieval_trace"]["attempts"] and details["query_transform"]["raw"] == "pg replica lag"
    assert "weights exploded: the second line says why" in service.trace_writer.store.get(result.invocation_id)["error"]


def test_a_retriever_failure_keeps_the_attempts_that_ran(config_for, tmp_path, monkeypatch):
    # A reference threshold no filtered attempt reaches forces the unfiltered retry, which fails.
    service = LookupService(config_for(f"sqlite:///{tmp_path}/traces.db", "retrieval.reference_threshold=0.99"))
    original = FallbackRetriever._attempt

    def retry_fails(self, index, *args):
        if index == 1:
            raise ConnectionError("vector store went away")
        return original(self, index, *args)

    monkeypatch.setattr(FallbackRetriever, "_attempt", retry_fails)
    result = service.lookup("pg replica lag")
    payload = result.to_dict()
    assert payload["error"]["component"] == "retriever"
    assert [a["index"] for a in payload["retrievalTrace"]["attempts"]] == [0]
    assert payload["l0Hints"]["entities"] == ["PostgreSQL"]
    details = service.trace_writer.store.get(result.invocation_id)["retrieval_details"]
    assert [a["index"] for a in details["retrieval_trace"]["attempts"]] == [0]
    assert details["l0_hints"]["entities"] == ["PostgreSQL"]


def test_a_negative_trace_timeout_is_bad_input(tmp_path, capsys):
    assert main(["traces", "list", *state_overrides(tmp_path / "state", "trace.timeout_s=-1")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trace.timeout_s" in err
