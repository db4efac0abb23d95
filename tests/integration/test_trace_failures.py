"""
Failed calls are recorded too (status=error, the error) and return a structured error result;
an invalid query leaves its row and still raises. The trace database going away (a real
PostgreSQL made unreachable, then reachable again) spools records and replays them.
"""

import contextlib
import json
import socket
import threading

import pytest

from components.contracts import STATUS_ERROR, InvalidQueryError
from pipelines.cli import main
from pipelines.config.settings import load_config
from pipelines.lookup import LookupService
from tests.conftest import sample_overrides, state_overrides


@pytest.fixture
def service_for(sample_cfg, tmp_path):
    """service_for(*overrides): a LookupService over the sample index with its own trace database."""

    def make(*overrides: str, db_url: str | None = None) -> LookupService:
        url = db_url or f"sqlite:///{tmp_path}/traces.db"
        cfg = load_config(
            state_overrides(tmp_path / "state", *sample_overrides(sample_cfg, f"trace.db_url='{url}'", *overrides))
        )
        return LookupService(cfg)

    return make


def test_a_component_failure_is_recorded_and_returned_as_a_structured_error(service_for, monkeypatch):
    service = service_for()
    service.warm_up()

    def broken(**_kwargs):
        raise RuntimeError("reranker weights exploded")

    monkeypatch.setattr(service.pipeline.get_component("reranker"), "run", broken)
    result = service.lookup("disk full on /var")
    assert result.evidence_status == STATUS_ERROR and result.found is False
    assert result.error == {"type": "RuntimeError", "message": "reranker weights exploded", "component": "reranker"}
    assert result.trace_status == "recorded"
    payload = result.to_dict()
    assert payload["invocationId"] == result.invocation_id and payload["evidenceStatus"] == "error"
    row = service.trace_writer.store.get(result.invocation_id)
    assert row["status"] == "error" and row["found"] is False
    assert "reranker weights exploded" in row["error"] and "reranker" in row["error"]
    assert row["retrieval_details"]["error"]["component"] == "reranker"
    assert row["arguments"] == {"query": "disk full on /var"}


def test_a_vector_store_that_does_not_answer_is_recorded(service_for):
    service = service_for("milvus.collection=no_such_collection")
    result = service.lookup("disk full on /var")
    assert result.evidence_status == STATUS_ERROR
    assert result.error["component"] == "retriever"
    row = service.trace_writer.store.get(result.invocation_id)
    assert row["status"] == "error" and "no_such_collection" in row["error"]
    # Stages are recorded only where MLflow tracing ever ran in the process; none past the failure.
    assert "retriever" not in row["retrieval_details"]["completed_stages"]


def test_an_empty_query_leaves_its_error_row_then_raises(service_for):
    service = service_for()
    with pytest.raises(InvalidQueryError):
        service.lookup("   ")
    rows = service.trace_writer.store.latest(last=5)
    assert len(rows) == 1
    assert rows[0]["status"] == "error" and rows[0]["error"].startswith("InvalidQueryError")


def test_an_overlong_query_rejected_inside_the_pipeline_is_recorded_and_raised(service_for):
    service = service_for("query.on_overlong=error", "query.max_chars=20")
    with pytest.raises(InvalidQueryError, match="limit is 20"):
        service.lookup("a query that is much longer than twenty characters")
    row = service.trace_writer.store.latest(last=1)[0]
    assert row["status"] == "error" and "query_transformer" in row["error"]


def test_cli_prints_the_structured_error_and_exits_1(sample_cfg, tmp_path, capsys):
    overrides = state_overrides(
        tmp_path / "state", *sample_overrides(sample_cfg, "milvus.collection=no_such_collection")
    )
    assert main(["lookup", "--compact", "disk full", *overrides]) == 1
    out, err = capsys.readouterr()
    payload = json.loads(out)
    assert payload["evidenceStatus"] == "error" and payload["invocationId"]
    assert err.count("\n") == 1 and err.startswith("knowledge: error: Knowledge lookup failed in retriever")
    assert payload["invocationId"] in err


def test_trace_database_down_spools_and_the_lookup_still_answers(service_for, tmp_path):
    (tmp_path / "blocked").write_text("a file where the database folder should be")
    service = service_for(db_url=f"sqlite:///{tmp_path}/blocked/traces.db")
    result = service.lookup("certificate expiry")
    assert result.found and result.trace_status == "spooled"
    assert result.to_dict()["traceStatus"] == "spooled"
    assert [r["id"] for r in service.trace_writer.store.spooled()] == [result.invocation_id]


class TcpProxy:
    """A TCP forwarder to PostgreSQL that the test can stop (server unreachable) and start again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        self._forwarding = threading.Event()
        self._forwarding.set()

    def pause(self) -> None:
        """Stop forwarding but keep every connection open: a server that no longer answers."""
        self._forwarding.clear()

    def resume(self) -> None:
        self._forwarding.set()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        self._forwarding.set()  # paused pipes wake up and end
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() (close alone does not)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
                connection.close()
            self._connections.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._connections += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._forwarding.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def pg_proxy_url(pg_schema_url):
    proxy = TcpProxy(("127.0.0.1", 5432))
    proxy.start()
    yield proxy, pg_schema_url.replace("@127.0.0.1:5432/", f"@127.0.0.1:{proxy.port}/")
    proxy.stop()


def test_postgres_unreachable_then_back_spools_and_replays_in_order_exactly_once(service_for, pg_proxy_url):
    proxy, url = pg_proxy_url
    service = service_for(db_url=url)
    store = service.trace_writer.store
    first = service.lookup("certificate expiry")
    assert first.trace_status == "recorded"

    proxy.stop()  # PostgreSQL unreachable: pooled connections die, new ones are refused
    during = [service.lookup(q) for q in ("disk full on /var", "pg replica lag", "how to bake sourdough bread")]
    assert [r.trace_status for r in during] == ["spooled"] * 3
    assert during[0].found and not during[2].found  # the lookups themselves are unaffected
    assert [r["id"] for r in store.spooled()] == [r.invocation_id for r in during]

    proxy.start()  # reachable again: the next write replays the spool first
    after = service.lookup("runaway process high cpu")
    assert after.trace_status == "recorded"
    assert store.spooled() == []
    rows = store.iter_all()
    expected = [first.invocation_id, *(r.invocation_id for r in during), after.invocation_id]
    assert sorted(r["id"] for r in rows) == sorted(expected) and len(rows) == 5
    by_id = {r["id"]: r for r in rows}
    assert [by_id[r.invocation_id]["trace_status"] for r in during] == ["replayed"] * 3
    assert by_id[during[1].invocation_id]["retrieval_details"]["l0_hints"]["entities"] == ["PostgreSQL"]
    # In call order: created_at is the call's start, whatever the write time.
    assert [r["id"] for r in rows] == expected


def test_postgres_spool_replayed_by_the_cli_command(service_for, pg_proxy_url, sample_cfg, tmp_path, capsys):
    proxy, url = pg_proxy_url
    service = service_for(db_url=url)
    service.warm_up()
    proxy.stop()
    spooled = [service.lookup(q) for q in ("certificate expiry", "disk full on /var")]
    assert {r.trace_status for r in spooled} == {"spooled"}
    overrides = state_overrides(tmp_path / "state", f"trace.db_url='{url}'")
    assert main(["traces", "replay", *overrides]) == 1  # still down: one line, spool kept
    assert "cannot replay" in capsys.readouterr().err
    proxy.start()
    assert main(["traces", "replay", *overrides]) == 0
    assert "replayed 2 spooled record(s)" in capsys.readouterr().out
    assert main(["traces", "replay", *overrides]) == 0
    assert "replayed 0 spooled record(s)" in capsys.readouterr().out
    assert {r["id"] for r in service.trace_writer.store.iter_all()} == {r.invocation_id for r in spooled}
