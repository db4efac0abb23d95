"""SidecarComparator: off by default, the other path's comparable results, and failures as a status."""

import pytest

from components.contracts import IndexPlan, RetrievalAttempt, RetrievalTrace
from components.indexing.milvus_writer import MilvusChunkWriter
from components.lookup.sidecar_comparator import SidecarComparator, comparable
from components.stores.knowledge_store import KnowledgeStore
from components.stores.milvus_auth import MilvusAuth, env_secret
from components.stores.vector_search import SdkVectorSearch
from tests.components.chunks import chunk
from tests.components.refusals import assert_refused
from tests.helpers import assert_round_trips, candidate

CHUNKS = [
    chunk("disk/full.md", 0, [1, 0, 0, 0], "disk", content="x" * 300),
    chunk("disk/full.md", 1, [1, 1, 0, 0], "disk"),
    chunk("db/lag.md", 0, [0, 1, 0, 0], "db"),
]
QUERY = [1.0, 0.0, 0.0, 0.0]


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("sidecar") / "milvus.db")
    MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="kb")).run(documents=CHUNKS, plan=IndexPlan())
    return uri


def trace(path: str = "sdk", category: str | None = None) -> RetrievalTrace:
    attempt = RetrievalAttempt(0, category, None, "disk full", path, 3, 3, 1.0, "evidence")
    return RetrievalTrace(attempts=[attempt], selected_attempt=0, vector_store_mode=path)


def main_candidates(uri: str, category: str | None = None):
    return SdkVectorSearch(KnowledgeStore(uri=uri, collection="kb")).search(QUERY, 3, category)


def test_disabled_by_default_and_needs_no_inputs():
    assert SidecarComparator(KnowledgeStore(uri="/data/kb.db")).run()["sidecar"].status == "disabled"


def test_an_unknown_path_is_refused_at_init():
    with pytest.raises(ValueError, match="path='spring' must be one of other, sdk, haystack"):
        SidecarComparator(KnowledgeStore(uri="/data/kb.db"), path="spring")


def test_without_a_selected_attempt_the_sidecar_is_skipped(uri):
    sidecar = SidecarComparator(store=KnowledgeStore(uri=uri, collection="kb"), enabled=True)
    report = sidecar.run(query_embedding=QUERY, candidates=[], retrieval_trace=RetrievalTrace())["sidecar"]
    assert report.status == "skipped" and report.error == "no main retrieval attempt"


def test_the_other_path_runs_beside_the_main_one_with_comparable_results(uri):
    sidecar = SidecarComparator(store=KnowledgeStore(uri=uri, collection="kb"), enabled=True, top_k=2)
    report = sidecar.run(query_embedding=QUERY, candidates=main_candidates(uri), retrieval_trace=trace())["sidecar"]
    assert (report.status, report.path, report.main_path, report.error) == ("ok", "haystack", "sdk", None)
    assert [row["rank"] for row in report.results] == [1, 2]
    assert [row["evidence_key"] for row in report.results] == ["disk/full.md#0", "disk/full.md#1"]
    first = report.results[0]
    assert first["path"] == "haystack" and first["score_label"].startswith("milvus_haystack_l2_score")
    assert first["similarity"] == pytest.approx(1.0, abs=1e-4) and first["score_value"] == pytest.approx(1.0, abs=1e-4)
    assert first["source"] == "disk/full.md" and first["category"] == "disk"
    assert first["content_preview"] == "x" * 160
    assert report.comparison  # the side-by-side comparison of both lists


def test_a_named_path_replays_the_main_attempts_category_filter(uri):
    sidecar = SidecarComparator(store=KnowledgeStore(uri=uri, collection="kb"), enabled=True, path="sdk")
    report = sidecar.run(
        query_embedding=QUERY, candidates=main_candidates(uri, "db"), retrieval_trace=trace("haystack", "db")
    )["sidecar"]
    assert (report.status, report.path, report.main_path) == ("ok", "sdk", "haystack")
    assert [row["source"] for row in report.results] == ["db/lag.md"]
    assert report.results[0]["score_label"] == "l2_squared_distance"


def test_a_failing_path_is_reported_and_never_raises(uri):
    sidecar = SidecarComparator(store=KnowledgeStore(uri=uri, collection="absent"), enabled=True)
    report = sidecar.run(query_embedding=QUERY, candidates=[], retrieval_trace=trace())["sidecar"]
    assert (report.status, report.path, report.main_path) == ("error", "haystack", "sdk")
    assert report.error.startswith("LookupError: collection absent does not exist")
    assert report.results == []


def test_comparable_rows_rank_and_label_each_candidate():
    rows = comparable([candidate("a#0", "a.md", 0.8), candidate("b#0", "b.md", 0.6), candidate("c#0", "c.md", 0.5)], 2)
    assert [(r["rank"], r["evidence_key"]) for r in rows] == [(1, "a#0"), (2, "b#0")]
    assert rows[0]["score_label"] == "l2_squared_distance" and rows[0]["score_value"] == pytest.approx(0.4)
    assert rows[0]["path"] == "sdk" and rows[0]["similarity"] == 0.8


def test_round_trips():
    assert_round_trips(
        SidecarComparator(
            store=KnowledgeStore(uri="/data/kb.db", collection="kb", search_params={"nprobe": 4}),
            enabled=True,
            path="sdk",
            top_k=5,
        )
    )
    assert_round_trips(
        SidecarComparator(
            store=KnowledgeStore(
                uri="http://127.0.0.1:19530",
                auth=MilvusAuth(token=env_secret("token"), secure=True, server_pem_path="/certs/milvus.pem"),
            ),
            enabled=True,
        )
    )


class TestSidecarComparatorInit:
    @pytest.mark.parametrize("top_k", [0, -3])
    def test_refuses_a_top_k_under_one(self, top_k):
        store = KnowledgeStore(uri="unused.db", collection="kb")
        with pytest.raises(ValueError, match=f"^top_k={top_k} must be at least 1$"):
            SidecarComparator(store=store, top_k=top_k)


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("store", None, "must be a KnowledgeStore"),
    ("enabled", "false", "true or false"),
    ("path", "spring", "one of other, sdk, haystack"),
    ("top_k", -3, "at least 1"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(
        lambda **changed: SidecarComparator(**{**{"store": KnowledgeStore(uri="milvus.db")}, **changed}),
        parameter,
        value,
        rule,
    )
