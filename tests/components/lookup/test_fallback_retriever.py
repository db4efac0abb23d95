"""FallbackRetriever against a real Milvus Lite collection (the two-topic KB of the session)."""

import pytest

from components.contracts import (
    FALLBACK_LOW_QUALITY,
    FALLBACK_NO_EVIDENCE,
    FALLBACK_OUTSCORED,
    L0Hints,
    QueryTransform,
)
from components.lookup.fallback_retriever import BM25_CANNOT_CHANGE, BM25_OFF, FallbackRetriever
from components.lookup.query_embedder import KnowledgeQueryEmbedder
from components.stores.knowledge_store import KnowledgeStore
from components.stores.milvus_auth import MilvusAuth, env_secret
from components.stores.vector_search import NO_SPARSE_FIELD
from pipelines.config.settings import load_config
from tests.components.refusals import assert_refused
from tests.conftest import state_overrides
from tests.helpers import MODEL, assert_round_trips

WATERING = "how often should tomato plants be watered"


@pytest.fixture(scope="module")
def embed():
    embedder = KnowledgeQueryEmbedder(model=MODEL)

    def _embed(text: str):
        return QueryTransform(raw=text, normalized=text, variants=[text]), embedder.run(query=text)["query_embedding"]

    return _embed


def retriever(cfg, auth: MilvusAuth | None = None, search_params: dict | None = None, **params) -> FallbackRetriever:
    store = KnowledgeStore(cfg.milvus.uri, cfg.milvus.collection, auth=auth, search_params=search_params)
    return FallbackRetriever(store=store, **params)


def test_one_domain_gives_a_filtered_attempt_that_stands(topics_cfg, embed):
    transform, vector = embed(WATERING)
    out = retriever(topics_cfg).run(
        query_transform=transform, hints=L0Hints(domains=["gardening"]), query_embedding=vector
    )
    trace = out["retrieval_trace"]
    assert [a.category_filter for a in trace.attempts] == ["gardening"]
    assert trace.selected_attempt == 0 and trace.fallback_reason is None
    assert {c.category for c in out["candidates"]} == {"gardening"}


def test_no_domain_gives_one_unfiltered_attempt(topics_cfg, embed):
    transform, vector = embed(WATERING)
    out = retriever(topics_cfg).run(query_transform=transform, hints=L0Hints(), query_embedding=vector)
    assert [a.category_filter for a in out["retrieval_trace"].attempts] == [None]
    assert out["candidates"][0].source == "gardening/watering-tomatoes.md"


def test_a_weak_filtered_attempt_is_retried_without_the_filter(topics_cfg, embed):
    transform, vector = embed(WATERING)
    out = retriever(topics_cfg, reference_threshold=0.99).run(
        query_transform=transform, hints=L0Hints(domains=["databases"]), query_embedding=vector
    )
    trace = out["retrieval_trace"]
    assert [a.category_filter for a in trace.attempts] == ["databases", None]
    assert trace.fallback_reason in {FALLBACK_LOW_QUALITY, FALLBACK_NO_EVIDENCE}
    assert trace.selected_attempt == 1
    assert out["candidates"][0].source == "gardening/watering-tomatoes.md"


def test_a_filtered_attempt_without_usable_candidates_records_no_evidence(topics_cfg, embed):
    transform, vector = embed(WATERING)
    out = retriever(topics_cfg, evidence_threshold=0.95, reference_threshold=0.95).run(
        query_transform=transform, hints=L0Hints(domains=["databases"]), query_embedding=vector
    )
    assert out["retrieval_trace"].fallback_reason == FALLBACK_NO_EVIDENCE


def test_l1_disabled_searches_nothing(topics_cfg, embed):
    transform, vector = embed(WATERING)
    out = retriever(topics_cfg, l1_enabled=False).run(
        query_transform=transform, hints=L0Hints(domains=["gardening"]), query_embedding=vector
    )
    assert out["candidates"] == [] and out["retrieval_trace"].attempts == []


def failing_retry(topics_cfg, monkeypatch, **params) -> FallbackRetriever:
    """A retriever whose unfiltered retry (forced by a reference threshold nothing reaches) fails."""
    component = retriever(topics_cfg, reference_threshold=0.99, **params)
    original = component._attempt

    def retry_fails(index, *args):
        if index == 1:
            raise ConnectionError("vector store went away")
        return original(index, *args)

    monkeypatch.setattr(component, "_attempt", retry_fails)
    return component


def test_a_failed_search_is_raised_by_default(topics_cfg, embed, monkeypatch):
    transform, vector = embed(WATERING)
    with pytest.raises(ConnectionError, match="went away") as raised:
        failing_retry(topics_cfg, monkeypatch).run(
            query_transform=transform, hints=L0Hints(domains=["databases"]), query_embedding=vector
        )
    assert not hasattr(raised.value, "retrieval_trace")  # no trace rides on the exception


def test_a_failed_search_returns_its_failure_with_the_attempts_that_ran(topics_cfg, embed, monkeypatch):
    transform, vector = embed(WATERING)
    out = failing_retry(topics_cfg, monkeypatch, raise_on_failure=False).run(
        query_transform=transform, hints=L0Hints(domains=["databases"]), query_embedding=vector
    )
    assert list(out) == ["failure"]  # nothing after the retriever runs on a failed search
    failure = out["failure"]
    assert isinstance(failure.error, ConnectionError) and str(failure.error) == "vector store went away"
    trace = failure.outputs["retrieval_trace"]
    assert [a.index for a in trace.attempts] == [0] and trace.attempts[0].category_filter == "databases"


def test_uncovered_terms_raise_the_evidence_bar(topics_cfg):
    component = retriever(topics_cfg, evidence_threshold=0.35, uncovered_evidence_threshold=0.5)
    assert component.evidence_bar(L0Hints()) == 0.35
    assert component.evidence_bar(L0Hints(uncovered_terms=["redis"])) == 0.5


def test_an_unknown_mode_is_refused(topics_cfg):
    with pytest.raises(ValueError, match="vector_store_mode"):
        retriever(topics_cfg, vector_store_mode="spring")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"evidence_threshold": 1.2}, r"evidence_threshold=1.2 must lie in \[0, 1\]"),
        ({"uncovered_evidence_threshold": -0.5}, r"uncovered_evidence_threshold=-0.5 must lie in \[0, 1\]"),
        ({"reference_threshold": 2}, r"reference_threshold=2 must lie in \[0, 1\]"),
        ({"top_k": 0}, "top_k=0 must be at least 1"),
        ({"bm25_top_k": -1}, "bm25_top_k=-1 must be at least 0"),
    ],
)
def test_init_refuses_values_out_of_range_by_name(topics_cfg, params, message):
    with pytest.raises(ValueError, match=message):
        retriever(topics_cfg, **params)


def test_round_trips(topics_cfg):
    assert_round_trips(
        retriever(
            topics_cfg,
            top_k=7,
            vector_store_mode="auto",
            search_params={"nprobe": 4},
            bm25_top_k=5,
            outscored_margin=0.1,
            raise_on_failure=False,
        )
    )
    auth = MilvusAuth(token=env_secret("token"), secure=True, server_pem_path="/certs/milvus.pem")
    assert_round_trips(retriever(topics_cfg, auth=auth))


def test_the_searches_get_the_resolved_credentials(topics_cfg, monkeypatch):
    monkeypatch.setenv("MILVUS_TOKEN", "tok-3e8a")  # not a secret: a throwaway value
    auth = MilvusAuth(token=env_secret("token"), user=env_secret("user"), secure=True)
    monkeypatch.delenv("MILVUS_USER", raising=False)
    searches = retriever(topics_cfg, auth=auth, vector_store_mode="auto")
    for path in ("sdk", "haystack"):
        assert searches._search(path).store.credentials() == {"token": "tok-3e8a", "secure": True}
    assert retriever(topics_cfg)._search("sdk").store.credentials() == {}


# the BM25 leg ----------------------------------------------------------------------------------

RARE_WORD = "zorblaxctl"
# The made-up name beside a real word that another runbook is about: the embedding follows
# "certificate"; BM25 scores the exact rare word (the analyzer does not stem: "certificate" is not
# "certificates").
RARE_QUERY = f"{RARE_WORD} certificate"
# Four short runbooks; only the backup one mentions the archiver's made-up name, in passing.
TINY_KB = {
    "ops/backups.md": (
        "---\ntitle: Nightly Backups\ncategory: ops\n---\n# Nightly Backups\n\nBackups run every night at two "
        "and copy the database dumps to object storage for fourteen days. When a run fails, check the storage "
        f"credentials and the free space on the backup host. The archiver is {RARE_WORD}.\n"
    ),
    "ops/certificates.md": (
        "---\ntitle: Certificate Renewal\ncategory: ops\n---\n# Certificate Renewal\n\nTLS certificates are "
        "renewed thirty days before they expire. A failed renewal shows in the ingress logs; renew by hand with "
        "the issuer's command line and reload the proxy.\n"
    ),
    "ops/dns.md": (
        "---\ntitle: DNS Resolution Failures\ncategory: ops\n---\n# DNS Resolution Failures\n\nPods that cannot "
        "resolve service names usually point at an overloaded resolver. Check the resolver pods, their memory and "
        "the upstream servers they forward to.\n"
    ),
    "ops/queues.md": (
        "---\ntitle: Job Queue Backlog\ncategory: ops\n---\n# Job Queue Backlog\n\nA growing backlog means the "
        "workers cannot keep up. Scale the workers out, look for a poison message that keeps failing, and check "
        "the database the workers write to.\n"
    ),
}


@pytest.fixture(scope="module")
def tiny_cfg(tmp_path_factory):
    """The tiny KB indexed twice: with the BM25 full-text field, and without it (an older collection)."""
    from pipelines.indexing import run_indexing

    root = tmp_path_factory.mktemp("tiny")
    for source, text in TINY_KB.items():
        (root / "kb" / source).parent.mkdir(parents=True, exist_ok=True)
        (root / "kb" / source).write_text(text, encoding="utf-8")
    configs = {}
    for full_text in ("true", "false"):
        cfg = load_config(
            state_overrides(root / f"state-{full_text}", f"kb.path={root / 'kb'}", f"milvus.full_text={full_text}")
        )
        run_indexing(cfg, rebuild=True)
        configs[full_text] = cfg
    return configs


def test_only_the_bm25_leg_finds_a_document_by_an_exact_rare_word(tiny_cfg, embed):
    cfg = tiny_cfg["true"]
    transform, vector = embed(RARE_QUERY)
    dense_only = retriever(cfg, top_k=1, bm25_top_k=0).run(
        query_transform=transform, hints=L0Hints(), query_embedding=vector
    )
    assert "ops/backups.md" not in {c.source for c in dense_only["candidates"]}  # the embedding misses it
    assert dense_only["retrieval_trace"].legs == ["dense"] and dense_only["retrieval_trace"].bm25_skipped == BM25_OFF

    out = retriever(cfg, top_k=1, bm25_top_k=2).run(query_transform=transform, hints=L0Hints(), query_embedding=vector)
    by_source = {c.source: c for c in out["candidates"]}
    found = by_source["ops/backups.md"]
    assert (found.bm25_rank, found.attempt) == (1, 0) and found.bm25_score > 0
    assert found.hit_reasons == ["bm25:sdk attempt 0 (unfiltered) rank 1"]  # not found by the dense leg
    # Its similarity is the dense one, from its stored vector: what a full dense search gives it.
    every = KnowledgeStore(cfg.milvus.uri, cfg.milvus.collection).vector_search("sdk").search(vector, 10, None)
    searched = next(c for c in every if c.evidence_key == found.evidence_key)
    assert found.similarity == pytest.approx(searched.similarity, abs=1e-6)
    assert (found.raw_score, found.raw_score_label) == (
        pytest.approx(searched.raw_score, abs=1e-6),
        "l2_squared_distance",
    )
    trace = out["retrieval_trace"]
    assert trace.legs == ["dense", "bm25"] and trace.bm25_skipped is None
    (attempt,) = trace.attempts
    assert (attempt.legs, attempt.bm25_count, attempt.bm25_only_count) == (["dense", "bm25"], 1, 1)
    assert attempt.candidate_count == 2
    assert trace.to_dict()["attempts"][0]["bm25OnlyCount"] == 1


def test_a_collection_without_the_sparse_field_runs_dense_only_and_says_why(tiny_cfg, embed):
    cfg = tiny_cfg["false"]
    transform, vector = embed(RARE_QUERY)
    out = retriever(cfg, top_k=1, bm25_top_k=2).run(query_transform=transform, hints=L0Hints(), query_embedding=vector)
    trace = out["retrieval_trace"]
    assert trace.legs == ["dense"] and trace.bm25_skipped == NO_SPARSE_FIELD
    assert trace.to_dict()["bm25Skipped"] == "collection has no sparse field; run knowledge index --rebuild"
    assert trace.attempts[0].legs == ["dense"] and trace.attempts[0].bm25_count is None
    assert all(c.bm25_score is None for c in out["candidates"]) and len(out["candidates"]) == 1


# the BM25 leg of a filtered attempt that is retried anyway ----------------------------------------


class AlwaysBm25Retriever(FallbackRetriever):
    """The same retriever with every attempt running the BM25 leg: the reference of the skip."""

    def _bm25_cannot_change(self, path, dense, bar) -> bool:
        return False


def _outcome(out: dict) -> tuple:
    trace = out["retrieval_trace"]
    chunks = sorted((c.evidence_key, round(c.similarity, 6), c.attempt) for c in out["candidates"])
    return chunks, trace.fallback_reason, [(a.usable_count, a.top_similarity) for a in trace.attempts]


def test_a_filtered_attempt_retried_on_its_dense_leg_alone_skips_bm25_and_loses_nothing(topics_cfg, embed):
    transform, vector = embed(WATERING)
    params = {"bm25_top_k": 20, "evidence_threshold": 0.5, "reference_threshold": 0.5}
    hints = L0Hints(domains=["databases"])
    out = retriever(topics_cfg, **params).run(query_transform=transform, hints=hints, query_embedding=vector)
    trace = out["retrieval_trace"]
    assert trace.fallback_reason == FALLBACK_NO_EVIDENCE
    first, retry = trace.attempts
    assert (first.legs, first.bm25_count, first.bm25_skipped) == (["dense"], None, BM25_CANNOT_CHANGE)
    assert (retry.legs, retry.bm25_skipped) == (["dense", "bm25"], None) and retry.bm25_count > 0
    assert trace.legs == ["dense", "bm25"] and trace.bm25_skipped is None
    assert trace.to_dict()["attempts"][0]["bm25Skipped"] == BM25_CANNOT_CHANGE
    store = KnowledgeStore(uri=topics_cfg.milvus.uri, collection=topics_cfg.milvus.collection)
    reference = AlwaysBm25Retriever(store=store, **params)
    assert _outcome(out) == _outcome(reference.run(query_transform=transform, hints=hints, query_embedding=vector))


def test_the_bm25_leg_runs_in_a_retried_filtered_attempt_with_usable_candidates(topics_cfg, embed):
    transform, vector = embed(WATERING)
    hints = L0Hints(domains=["databases"])
    # Retried (top under 0.99), but its usable candidates go on, with what the BM25 leg says of them.
    out = retriever(topics_cfg, bm25_top_k=20, top_k=1, evidence_threshold=0.0, reference_threshold=0.99).run(
        query_transform=transform, hints=hints, query_embedding=vector
    )
    first = out["retrieval_trace"].attempts[0]
    assert out["retrieval_trace"].fallback_reason == FALLBACK_LOW_QUALITY
    assert first.legs == ["dense", "bm25"] and first.bm25_skipped is None
    # A filtered attempt that stands runs both legs too.
    kept = retriever(topics_cfg, bm25_top_k=20).run(
        query_transform=transform, hints=L0Hints(domains=["gardening"]), query_embedding=vector
    )
    assert kept["retrieval_trace"].attempts[0].legs == ["dense", "bm25"]


# the unfiltered check of a filtered attempt ----------------------------------------------------


def test_a_filtered_attempt_clearly_beaten_unfiltered_is_retried_as_outscored(topics_cfg, embed):
    transform, vector = embed(WATERING)
    # Thresholds low enough that the databases attempt stands by the spec's two rules.
    params = {"evidence_threshold": 0.0, "reference_threshold": 0.0}
    kept = retriever(topics_cfg, outscored_margin=1.0, **params).run(
        query_transform=transform, hints=L0Hints(domains=["databases"]), query_embedding=vector
    )
    assert kept["retrieval_trace"].fallback_reason is None
    assert kept["retrieval_trace"].attempts[0].unfiltered_top_similarity is None  # no check made

    out = retriever(topics_cfg, outscored_margin=0.05, **params).run(
        query_transform=transform, hints=L0Hints(domains=["databases"]), query_embedding=vector
    )
    trace = out["retrieval_trace"]
    first, retry = trace.attempts
    assert trace.fallback_reason == FALLBACK_OUTSCORED == "filtered_vector_outscored"
    assert first.outcome == "retried: filtered_vector_outscored" and trace.selected_attempt == 1
    assert first.unfiltered_top_similarity >= first.top_similarity + 0.05
    assert retry.category_filter is None and retry.top_similarity == pytest.approx(first.unfiltered_top_similarity)
    assert out["candidates"][0].source == "gardening/watering-tomatoes.md"


def test_a_highly_relevant_filtered_attempt_gets_no_unfiltered_check(topics_cfg, embed):
    transform, vector = embed(WATERING)
    params = {"evidence_threshold": 0.0, "reference_threshold": 0.0, "outscored_margin": 0.05}
    out = retriever(topics_cfg, outscored_check_below=0.0, **params).run(
        query_transform=transform, hints=L0Hints(domains=["databases"]), query_embedding=vector
    )
    (attempt,) = out["retrieval_trace"].attempts  # the same attempt that is outscored when checked
    assert attempt.outcome == "selected" and attempt.unfiltered_top_similarity is None


def test_a_filtered_attempt_close_to_the_unfiltered_best_stands(topics_cfg, embed):
    transform, vector = embed(WATERING)
    out = retriever(topics_cfg, outscored_margin=0.05, outscored_check_below=1.0).run(
        query_transform=transform, hints=L0Hints(domains=["gardening"]), query_embedding=vector
    )
    (attempt,) = out["retrieval_trace"].attempts
    assert attempt.outcome == "selected" and attempt.unfiltered_top_similarity == pytest.approx(attempt.top_similarity)


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("store", "milvus.db", "must be a KnowledgeStore"),
    ("top_k", -3, "at least 1"),
    ("reference_threshold", 1.5, "[0, 1]"),
    ("evidence_threshold", -0.1, "[0, 1]"),
    ("l1_enabled", "true", "true or false"),
    ("vector_store_mode", "fast", "one of sdk, haystack, auto"),
    ("uncovered_evidence_threshold", 2, "[0, 1]"),
    ("category_filter", 1, "true or false"),
    ("bm25_top_k", -1, "at least 0"),
    ("outscored_margin", 1.5, "[0, 1]"),
    ("outscored_check_below", -0.1, "[0, 1]"),
    ("calibration", "", "non-empty"),
    ("raise_on_failure", None, "true or false"),
    ("decision_model", "", "non-empty"),
    ("decision_vectors", "", "non-empty"),
    ("scan_depth", -1, "at least 0"),
    ("decision_scope", "some", "one of answer, all"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(
        lambda **changed: FallbackRetriever(**{**{"store": KnowledgeStore(uri="milvus.db")}, **changed}),
        parameter,
        value,
        rule,
    )
