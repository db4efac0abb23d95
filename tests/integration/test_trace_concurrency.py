"""
Concurrency against a real SQLite file and a real PostgreSQL: 8 threads x 200 recorded calls leave
exactly 1,600 rows, no "database is locked", no duplicate id.

The 8 x 200 runs go through `TraceWriter.run` (the pipeline's last step, the code that writes)
with real results, so they take seconds; the end-to-end runs share one `LookupService` (one
pipeline) between 8 threads for full lookups. Set KNOWLEDGE_CONCURRENCY_LOOKUPS=200 to run the
end-to-end test at 8 x 200 full lookups too (a few minutes on 2 cores).
"""

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from components.tracing.trace_writer import TraceWriter
from pipelines.config.settings import load_config
from pipelines.lookup import LookupService
from tests.conftest import sample_overrides, state_overrides

THREADS = 8
CALLS = 200
LOOKUPS_PER_THREAD = int(os.environ.get("KNOWLEDGE_CONCURRENCY_LOOKUPS", "15"))
QUERIES = [
    "disk full on /var",
    "pg replica lag",
    "certificate expiry",
    "runaway process high cpu",
    "inode exhaustion df -i",
    "how to bake sourdough bread",
]


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/traces.db"
    return request.getfixturevalue("pg_schema_url")


@pytest.fixture(scope="module")
def real_results(sample_service):
    return [sample_service.lookup(q) for q in QUERIES]


def _problems(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_8_threads_x_200_recorded_calls_leave_exactly_1600_rows(db_url, tmp_path, real_results, caplog):
    writer = TraceWriter(
        db_url=db_url, spool_path=str(tmp_path / "spool.jsonl"), tracking_uri=None, artifact_location=None
    )
    writer.warm_up()

    def worker(thread: int) -> list[str]:
        ids = []
        for n in range(CALLS):
            result = real_results[(thread + n) % len(real_results)]
            out = writer.run(result=result, arguments={"query": f"t{thread}-{n}"}, started_at=time.time())["result"]
            assert out.trace_status == "recorded", out.trace_status
            ids.append(out.invocation_id)
        return ids

    with caplog.at_level(logging.WARNING), ThreadPoolExecutor(THREADS) as pool:
        ids = [i for chunk in pool.map(worker, range(THREADS)) for i in chunk]
    assert len(ids) == len(set(ids)) == THREADS * CALLS
    assert writer.store.count() == THREADS * CALLS
    assert {r["id"] for r in writer.store.iter_all()} == set(ids)
    assert writer.store.spooled() == []
    assert not [m for m in _problems(caplog) if "locked" in m or "unavailable" in m]


def test_one_lookup_service_shared_by_8_threads(db_url, sample_cfg, tmp_path, caplog):
    cfg = load_config(state_overrides(tmp_path / "state", *sample_overrides(sample_cfg, f"trace.db_url='{db_url}'")))
    service = LookupService(cfg)
    service.warm_up()
    expected = {q: service.lookup(q).found for q in QUERIES}
    warmup_rows = len(QUERIES)

    def worker(thread: int) -> list[tuple[str, bool, str, str]]:
        out = []
        for n in range(LOOKUPS_PER_THREAD):
            query = QUERIES[(thread + n) % len(QUERIES)]
            result = service.lookup(query)
            out.append((query, result.found, result.invocation_id, result.trace_status))
        return out

    with caplog.at_level(logging.WARNING), ThreadPoolExecutor(THREADS) as pool:
        calls = [c for chunk in pool.map(worker, range(THREADS)) for c in chunk]
    ids = [c[2] for c in calls]
    assert len(ids) == len(set(ids)) == THREADS * LOOKUPS_PER_THREAD
    assert {c[3] for c in calls} == {"recorded"}
    assert all(found == expected[query] for query, found, _, _ in calls), "threads must not mix up results"
    store = service.trace_writer.store
    assert store.count() == THREADS * LOOKUPS_PER_THREAD + warmup_rows
    rows = {r["id"]: r for r in store.iter_all()}
    for query, found, invocation_id, _ in calls:
        assert rows[invocation_id]["arguments"] == {"query": query}
        assert rows[invocation_id]["found"] is found
    assert not [m for m in _problems(caplog) if "locked" in m or "unavailable" in m]
