"""RuleReranker: weighted deterministic signals, each contribution recorded."""

import copy
import random

import numpy as np
import pytest

from components.common.choices import DEFAULT_RERANK_WEIGHTS
from components.common.evidence import EvidenceBar
from components.contracts import L0Hints, QueryTransform
from components.lookup.rule_reranker import RuleReranker
from components.stores.l0_index import L0Entry, L0Index
from tests.components.refusals import assert_refused
from tests.helpers import assert_round_trips, candidate

BAR = EvidenceBar(configured=0.35, applied=0.35)


def test_weights_change_the_order_and_ties_break_by_key(l0_index):
    hints = L0Hints(matched_keywords=["zebra crossing"])
    qt = QueryTransform(raw="q", normalized="quokka", variants=["quokka"])
    embedding = [0.0] * 384
    plain = candidate("a", "elsewhere/a.md", 0.70, content="same text")
    hinted = candidate("b", "elsewhere/b.md", 0.60, content="same text", keywords=["Zebra Crossing"])

    def order(weights, cands):
        out = RuleReranker(weights=weights).run(
            query_transform=qt,
            hints=hints,
            candidates=copy.deepcopy(cands),
            query_embedding=embedding,
            evidence_bar=BAR,
            l0_index=l0_index,
        )["candidates"]
        return out

    assert [c.evidence_key for c in order({"keyword_match": 0.0}, [plain, hinted])] == ["a", "b"]
    boosted = order({"keyword_match": 0.5}, [plain, hinted])
    assert [c.evidence_key for c in boosted] == ["b", "a"]
    assert boosted[0].boosts == {"keyword_match": 0.25}  # one of its keywords matched: signal 0.5
    assert "l0_keyword: Zebra Crossing" in boosted[0].hit_reasons

    # Deterministic: the same input in any order gives the same ranking, ties broken by key.
    twins = [candidate(k, f"elsewhere/{k}.md", 0.5, content="same text") for k in "dcba"]
    runs = []
    for seed in range(3):
        shuffled = twins[:]
        random.Random(seed).shuffle(shuffled)
        runs.append([(c.evidence_key, c.final_score, c.boosts) for c in order(None, shuffled)])
    assert runs[0] == runs[1] == runs[2]
    assert [key for key, _, _ in runs[0]] == ["a", "b", "c", "d"]


def test_bm25_is_a_signal_of_its_own_relative_to_the_best_bm25_score(l0_index):
    qt = QueryTransform(raw="q", normalized="quokka", variants=["quokka"])
    lexical = candidate("a", "elsewhere/a.md", 0.60, content="same text", bm25_score=8.0, bm25_rank=1)
    half = candidate("b", "elsewhere/b.md", 0.60, content="same text", bm25_score=4.0, bm25_rank=2)
    dense = candidate("c", "elsewhere/c.md", 0.62, content="same text")
    weights = {name: 0.0 for name in DEFAULT_RERANK_WEIGHTS} | {"similarity": 1.0, "bm25": 0.1}
    ranked = RuleReranker(weights=weights).run(
        query_transform=qt,
        hints=L0Hints(),
        candidates=[dense, half, lexical],
        query_embedding=[0.0] * 384,
        evidence_bar=BAR,
        l0_index=l0_index,
    )["candidates"]
    assert [c.evidence_key for c in ranked] == ["a", "b", "c"]
    assert [c.boosts for c in ranked] == [{"bm25": 0.1}, {"bm25": 0.05}, {}]
    assert [c.similarity for c in ranked] == [0.60, 0.60, 0.62]  # the score stays the dense similarity
    off = RuleReranker(weights=weights | {"bm25": 0.0}).run(
        query_transform=qt,
        hints=L0Hints(),
        candidates=[dense, half, lexical],
        query_embedding=[0.0] * 384,
        evidence_bar=BAR,
        l0_index=l0_index,
    )["candidates"]
    assert off[0].evidence_key == "c"


def test_an_unknown_signal_is_refused():
    with pytest.raises(ValueError, match=r"^weights\.popularity=1\.0 is no rerank signal; known: similarity, "):
        RuleReranker(weights={"popularity": 1.0})


def test_a_negative_weight_is_refused_by_name():
    with pytest.raises(ValueError, match=r"weights\.bm25=-0\.1 must be at least 0"):
        RuleReranker(weights={"bm25": -0.1})


def test_every_signal_has_a_default_weight():
    assert RuleReranker().weights.keys() >= DEFAULT_RERANK_WEIGHTS.keys()


def test_round_trips():
    assert_round_trips(RuleReranker(weights={"keyword_match": 0.2}))


def test_run_returns_new_candidates_and_leaves_its_inputs_unchanged(l0_index):
    hints = L0Hints(matched_keywords=["zebra crossing"])
    qt = QueryTransform(raw="q", normalized="quokka", variants=["quokka"])
    given = [
        candidate("a", "elsewhere/a.md", 0.70, content="same text"),
        candidate("b", "elsewhere/b.md", 0.60, content="same text", keywords=["Zebra Crossing"]),
    ]
    before = copy.deepcopy(given)
    ranked = RuleReranker().run(
        query_transform=qt,
        hints=hints,
        candidates=given,
        query_embedding=[0.0] * 384,
        evidence_bar=BAR,
        l0_index=l0_index,
    )["candidates"]
    assert given == before
    assert not any(out is inp for out in ranked for inp in given)
    hinted = next(c for c in ranked if c.evidence_key == "b")
    assert hinted.hit_reasons == ["l0_keyword: Zebra Crossing"] and hinted.final_score > 0


class TestRuleRerankerSignals:
    """One test per signal: that signal alone weighted, a candidate that has it against one that has not."""

    @staticmethod
    def boosts(l0_index, signal, candidates, query="quokka", hints=None, bar=BAR):
        weights = {name: 0.0 for name in DEFAULT_RERANK_WEIGHTS} | {signal: 1.0}
        ranked = RuleReranker(weights=weights).run(
            query_transform=QueryTransform(raw=query, normalized=query, variants=[query]),
            hints=hints or L0Hints(),
            candidates=candidates,
            query_embedding=[0.0] * 384,
            evidence_bar=bar,
            l0_index=l0_index,
        )["candidates"]
        return {c.evidence_key: (c.final_score, c.boosts.get(signal, 0.0)) for c in ranked}

    def test_similarity_is_the_base_score_and_never_a_boost(self, l0_index):
        out = self.boosts(l0_index, "similarity", [candidate("a", "x/a.md", 0.7), candidate("b", "x/b.md", 0.4)])
        assert out == {"a": (0.7, 0.0), "b": (0.4, 0.0)}

    def test_lexical_overlap_counts_the_query_terms_in_the_chunk(self, l0_index):
        hit = candidate("a", "x/a.md", 0.5, content="the standby replication lag grows")
        miss = candidate("b", "x/b.md", 0.5, content="nothing to see")
        out = self.boosts(l0_index, "lexical_overlap", [hit, miss], query="replication lag")
        assert out["a"][1] > 0 and out["b"][1] == 0

    def test_title_overlap_reads_the_documents_title_from_the_l0_index(self, l0_index):
        titled = candidate("a", "database/replication-lag.md", 0.5)
        other = candidate("b", "x/b.md", 0.5)
        out = self.boosts(l0_index, "title_overlap", [titled, other], query="postgresql replication lag")
        assert out["a"][1] > 0 and out["b"][1] == 0

    def test_document_lexical_counts_the_query_terms_anywhere_in_the_document(self, l0_index):
        known = candidate("a", "disk/DiskAlmostFull.md", 0.5)
        other = candidate("b", "x/b.md", 0.5)
        out = self.boosts(l0_index, "document_lexical", [known, other], query="volume space")
        assert out["a"][1] == 1.0 and out["b"][1] == 0

    def test_name_match_for_a_document_the_query_names(self, l0_index):
        hints = L0Hints(named_sources=["disk/DiskAlmostFull.md"])
        named = candidate("a", "disk/DiskAlmostFull.md", 0.5)
        out = self.boosts(l0_index, "name_match", [named, candidate("b", "x/b.md", 0.5)], hints=hints)
        assert out["a"][1] == 1.0 and out["b"][1] == 0

    def test_title_match_for_a_matched_title(self, l0_index):
        hints = L0Hints(matched_titles=["Disk Almost Full"])
        titled = candidate("a", "disk/DiskAlmostFull.md", 0.5, title="Disk Almost Full")
        out = self.boosts(l0_index, "title_match", [titled, candidate("b", "x/b.md", 0.5)], hints=hints)
        assert out["a"][1] == 1.0 and out["b"][1] == 0

    def test_entity_match_for_a_matched_entity(self, l0_index):
        hints = L0Hints(entities=["PostgreSQL"])
        pg = candidate("a", "database/replication-lag.md", 0.5, entities=["PostgreSQL"])
        out = self.boosts(l0_index, "entity_match", [pg, candidate("b", "x/b.md", 0.5)], hints=hints)
        assert out["a"][1] == 1.0 and out["b"][1] == 0

    def test_domain_match_for_a_category_the_query_names(self, l0_index):
        hints = L0Hints(domains=["disk"])
        disk = candidate("a", "disk/DiskAlmostFull.md", 0.5, category="disk")
        out = self.boosts(l0_index, "domain_match", [disk, candidate("b", "x/b.md", 0.5)], hints=hints)
        assert out["a"][1] == 1.0 and out["b"][1] == 0

    def test_section_match_for_the_section_kind_the_query_asks_for(self, l0_index):
        fix = candidate("a", "x/a.md", 0.5, section_kind="mitigation")
        why = candidate("b", "x/b.md", 0.5, section_kind="diagnosis")
        out = self.boosts(l0_index, "section_match", [fix, why], query="how to fix the disk")
        assert out["a"][1] == 1.0 and out["b"][1] == 0

    def test_document_support_counts_other_usable_chunks_of_the_document(self, l0_index):
        chunks = [candidate(f"a{i}", "x/a.md", 0.6) for i in range(4)] + [candidate("b", "x/b.md", 0.6)]
        low = [candidate("c0", "x/c.md", 0.6), candidate("c1", "x/c.md", 0.2)]
        out = self.boosts(l0_index, "document_support", chunks + low)
        assert out["a0"][1] == 1.0 and out["b"][1] == 0 and out["c0"][1] == 0  # under the bar: no support

    def test_document_similarity_is_zero_without_summary_vectors(self, l0_index):
        out = self.boosts(l0_index, "document_similarity", [candidate("a", "disk/DiskAlmostFull.md", 0.5)])
        assert out["a"] == (0.0, 0.0)

    def test_no_candidates_give_no_candidates(self, l0_index):
        assert self.boosts(l0_index, "similarity", []) == {}


def ranked(l0_index, candidates, query="quokka", hints=None, embedding=None, **weights):
    """The candidates reranked with only the given signals weighted."""
    only = {name: 0.0 for name in DEFAULT_RERANK_WEIGHTS} | weights
    return RuleReranker(weights=only).run(
        query_transform=QueryTransform(raw=query, normalized=query, variants=[query]),
        hints=hints or L0Hints(),
        candidates=candidates,
        query_embedding=embedding or [0.0] * 384,
        evidence_bar=BAR,
        l0_index=l0_index,
    )["candidates"]


def l0_with_summary_vectors(vectors: dict[str, list[float]]) -> L0Index:
    entries = [L0Entry(source=source, title=source, category="ops") for source in vectors]
    return L0Index(entries, summary_vectors=np.array(list(vectors.values()), dtype=np.float32), model="t")


class TestRuleReranker:
    def test_run_scores_document_similarity_as_the_cosine_with_the_summary_floored_at_zero(self):
        index = l0_with_summary_vectors({"x/a.md": [1.0, 0.0], "x/b.md": [-1.0, 0.0]})
        out = ranked(
            index,
            [candidate("a", "x/a.md", 0.5), candidate("b", "x/b.md", 0.5)],
            embedding=[0.6, 0.8],
            document_similarity=1.0,
        )
        assert [(c.evidence_key, c.final_score, c.boosts) for c in out] == [
            ("a", 0.6, {"document_similarity": 0.6}),
            ("b", 0.0, {}),
        ]

    @pytest.mark.parametrize(
        ("hints", "fields", "reason"),
        [
            (L0Hints(named_sources=["disk/DiskAlmostFull.md"]), {}, "l0_name: DiskAlmostFull"),
            (L0Hints(matched_titles=["Disk Almost Full"]), {"title": "Disk Almost Full"}, "l0_title: Disk Almost Full"),
            (L0Hints(domains=["disk"]), {"category": "disk"}, "l0_domain: disk"),
            (L0Hints(entities=["PostgreSQL"]), {"entities": ["PostgreSQL", "Linux"]}, "l0_entity: PostgreSQL"),
        ],
    )
    def test_run_gives_each_matched_hint_its_reason(self, l0_index, hints, fields, reason):
        out = ranked(l0_index, [candidate("a", "disk/DiskAlmostFull.md", 0.5, **fields)], hints=hints)
        assert out[0].hit_reasons == [reason]

    def test_run_finds_query_terms_at_the_joins_of_title_breadcrumb_and_keywords(self, l0_index):
        # Capitals: a word runs on into the next text only when the two are joined without a space.
        chunk = candidate(
            "a", "x/a.md", 0.5, title="DISK ALMOST FULL", keywords=["REPLICATION LAG", "WAL"], content="x"
        )
        assert ranked(l0_index, [chunk], query="full lag", lexical_overlap=1.0)[0].boosts == {"lexical_overlap": 1.0}

    def test_run_saturates_the_keyword_match_at_two_keywords(self, l0_index):
        hints = L0Hints(matched_keywords=["disk space", "disk full", "volume"])
        chunk = candidate("a", "x/a.md", 0.5, keywords=["Disk Space", "Disk Full", "Volume"])
        assert ranked(l0_index, [chunk], hints=hints, keyword_match=1.0)[0].boosts == {"keyword_match": 1.0}

    def test_run_rounds_the_final_score_to_6_decimals_and_each_boost_to_4(self, l0_index):
        chunks = [candidate("a", "x/a.md", 0.1234567, bm25_score=3.0), candidate("b", "x/b.md", 0.5, bm25_score=1.0)]
        out = ranked(l0_index, chunks, similarity=1.0, bm25=1.0)
        assert [(c.evidence_key, c.final_score, c.boosts) for c in out] == [
            ("a", 1.123457, {"bm25": 1.0}),
            ("b", 0.833333, {"bm25": 0.3333}),
        ]

    def test_run_scores_bm25_against_a_best_score_under_one(self, l0_index):
        chunks = [candidate("a", "x/a.md", 0.5, bm25_score=0.5), candidate("b", "x/b.md", 0.5, bm25_score=0.25)]
        assert [c.boosts for c in ranked(l0_index, chunks, bm25=1.0)] == [{"bm25": 1.0}, {"bm25": 0.5}]

    @pytest.mark.parametrize(
        ("similarities", "support"),
        [((0.35, 0.6), 0.3333), ((0.6,) * 5, 1.0)],
        ids=["one-other-chunk-at-the-bar", "saturated"],
    )
    def test_run_counts_a_documents_other_chunks_at_the_bar_up_to_three(self, l0_index, similarities, support):
        chunks = [candidate(f"a{n}", "x/a.md", similarity) for n, similarity in enumerate(similarities)]
        assert ranked(l0_index, chunks, document_support=1.0)[0].boosts == {"document_support": support}


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("weights", {"bm25": -1}, "at least 0"),
    ("weights", {"nope": 1}, "no rerank signal"),
    ("weights", ["bm25"], "must map rerank signals"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(lambda **changed: RuleReranker(**changed), parameter, value, rule)
