from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any

import numpy as np
from haystack import component

from components.common.choices import DEFAULT_RERANK_WEIGHTS, check_rerank_weights
from components.common.decision_scale import ranking_similarity
from components.common.evidence import EvidenceBar
from components.common.text import fold, terms
from components.contracts import Candidate, L0Hints, QueryTransform
from components.lookup.query_intents import query_intents
from components.stores.l0_index import L0Index
from components.stores.l0_index_file import check_summary_dimension
from components.stores.vector_search import Embedding

_SUPPORT_SATURATION = 3


@dataclass(frozen=True)
class _QueryFacts:
    """What every candidate of one run is scored against: the query's terms, intents and hints, the run's figures."""

    weighted_terms: dict[str, float]
    intents: set[str]
    document_scores: dict[str, float]
    support: Counter
    best_bm25: float
    named_sources: set[str]
    matched_titles: set[str]
    matched_keywords: set[str]
    matched_entities: set[str]
    domains: set[str]


@component
class RuleReranker:
    """
    Reranks vector candidates with deterministic, traceable signals; each signal lies in [0, 1]
    and contributes `weight * signal` to the final score:

    - `similarity`: the normalized vector similarity (the base score);
    - `document_similarity`: cosine of the query with the document's summary embedding (title
      and opening section, from the L0 index): how well the whole document fits, not one chunk;
    - `lexical_overlap`: IDF-weighted share of the query's terms found in the chunk, its
      breadcrumb and title (alert label values such as addresses and hashes ignored);
    - `title_overlap`: IDF-weighted share of the document title's terms found in the query;
    - `document_lexical`: IDF-weighted share of the query's terms found anywhere in the document;
    - `name_match`: the query quotes the document's name verbatim, e.g. the alert name in an
      Alertmanager notification ("[FIRING:1] KubeQuotaAlmostFull ..."): a precise hint, weighted high;
    - `title_match`, `keyword_match`, `entity_match`, `domain_match`: L0 hints that match the
      candidate's document (each becomes a hit reason on the block, never evidence itself);
    - `section_match`: the query asks for a fix / a diagnosis / a meaning and the chunk's
      section is of that kind;
    - `document_support`: other candidates of the same document also matched;
    - `bm25`: the chunk's BM25 full-text score over the best BM25 score among the candidates (0 for
      a chunk the BM25 leg did not return): exact words (`inodes` vs `space`) that embeddings blur.

    Weights come from config (`rerank.weights`); ties break on similarity, then evidence key, so
    the order is reproducible.

    Usage example:

    ```python
    >>> from components.common.evidence import EvidenceBar
    >>> from components.contracts import Candidate, L0Hints, QueryTransform
    >>> from components.stores.l0_index import L0Index
    >>> index = L0Index([], term_df={"disk": 1, "space": 1})  # the idf of the query's terms
    >>> def chunk(key, source, text, similarity):
    ...     return Candidate(key, source, text, similarity, 2 - 2 * similarity, "l2", "sdk")
    >>> candidates = [chunk("a#0", "a.md", "restart the service", 0.62), chunk("b#0", "b.md", "free disk space", 0.6)]
    >>> qt = QueryTransform(raw="disk space", normalized="disk space", variants=["disk space"])
    >>> reranker = RuleReranker(weights={"lexical_overlap": 0.3})
    >>> ranked = reranker.run(query_transform=qt, hints=L0Hints(), candidates=candidates, query_embedding=[0.0] * 384,
    ...                       evidence_bar=EvidenceBar(configured=0.35, applied=0.35), l0_index=index)["candidates"]
    >>> [(c.evidence_key, c.boosts) for c in ranked]
    [('b#0', {'lexical_overlap': 0.3}), ('a#0', {})]

    ```
    """

    def __init__(
        self,
        weights: Mapping[str, float] | None = MappingProxyType(DEFAULT_RERANK_WEIGHTS),
    ) -> None:
        """
        :param weights: Signal weights; missing signals take the defaults, 0 turns one off.
        """
        check_rerank_weights(weights or {})
        self.weights = {**DEFAULT_RERANK_WEIGHTS, **(weights or {})}

    @component.output_types(candidates=list[Candidate])
    def run(
        self,
        query_transform: QueryTransform,
        hints: L0Hints,
        candidates: list[Candidate],
        query_embedding: Embedding,
        evidence_bar: EvidenceBar,
        l0_index: L0Index,
    ) -> dict[str, Any]:
        """
        :param query_transform: The transformed query.
        :param hints: L0 hints of the query.
        :param candidates: Vector candidates (any order; duplicates allowed).
        :param query_embedding: The normalised query's embedding, compared with document summaries.
        :param evidence_bar: The retriever's; candidates at or above its configured threshold count
            as document support.
        :param l0_index: The L0 index the lookup read (summary vectors, term statistics, document metadata).
        :returns: The candidates sorted by final score, with `final_score`, `boosts` and hit reasons set.
        """
        if not candidates:
            return {"candidates": []}
        query_term_set = set(terms(query_transform.normalized, drop_noise=True))
        query_terms = self._weighted_query_terms(l0_index, query_term_set)
        intents = query_intents(query_transform.normalized)
        check_summary_dimension(l0_index, len(query_embedding))
        facts = _QueryFacts(
            weighted_terms=query_terms,
            intents=intents,
            document_scores=self._document_similarities(l0_index, candidates, query_embedding),
            support=_document_support(candidates, evidence_bar),
            best_bm25=max((c.bm25_score or 0.0 for c in candidates), default=0.0),
            named_sources=set(hints.named_sources),
            matched_titles=set(hints.matched_titles),
            matched_keywords={fold(k) for k in hints.matched_keywords},
            matched_entities=set(hints.entities),
            domains=set(hints.domains),
        )
        # Document-level signals are the same for every chunk of a source: computed once each.
        documents = {
            source: (
                l0_index.title_overlap(source, query_term_set),
                _coverage(query_terms, l0_index.document_terms(source)),
            )
            for source in dict.fromkeys(c.source for c in candidates)
        }
        scored = [self._scored(candidate, facts, documents[candidate.source]) for candidate in candidates]
        ranked = sorted(scored, key=lambda c: (-c.final_score, -c.similarity, c.evidence_key))
        return {"candidates": ranked}

    def _scored(self, candidate: Candidate, facts: _QueryFacts, document: tuple[float, float]) -> Candidate:
        contributions = {
            name: self.weights[name] * value for name, value in self._signals(candidate, facts, document).items()
        }
        reasons = self._hint_reasons(candidate, facts)
        # A new candidate: the caller's list (also read by other components) stays as it came.
        return replace(
            candidate,
            final_score=round(sum(contributions.values()), 6),
            boosts={
                name: round(value, 4) for name, value in contributions.items() if name != "similarity" and value > 0
            },
            hit_reasons=[*candidate.hit_reasons, *reasons],
        )

    def _signals(self, candidate: Candidate, facts: _QueryFacts, document: tuple[float, float]) -> dict[str, float]:
        title_overlap, document_lexical = document
        return {
            "similarity": ranking_similarity(candidate),  # the ranking model's, beside a decision model
            "document_similarity": facts.document_scores.get(candidate.source, 0.0),
            "lexical_overlap": self._lexical_overlap(facts.weighted_terms, candidate),
            "title_overlap": title_overlap,
            "document_lexical": document_lexical,
            "name_match": 1.0 if candidate.source in facts.named_sources else 0.0,
            "title_match": 1.0 if candidate.title in facts.matched_titles else 0.0,
            "keyword_match": _keyword_share(candidate, facts.matched_keywords),
            "entity_match": 1.0 if facts.matched_entities & set(candidate.entities) else 0.0,
            "domain_match": 1.0 if candidate.category in facts.domains else 0.0,
            "section_match": 1.0 if candidate.section_kind in facts.intents else 0.0,
            "document_support": min(1.0, max(0, facts.support[candidate.source] - 1) / _SUPPORT_SATURATION),
            "bm25": (candidate.bm25_score or 0.0) / facts.best_bm25 if facts.best_bm25 > 0 else 0.0,
        }

    @staticmethod
    def _weighted_query_terms(index: L0Index, query_terms: set[str]) -> dict[str, float]:
        weighted = {}
        for term in query_terms:
            idf = index.idf(term)
            if idf > 0:
                weighted[term] = idf
        return weighted

    @staticmethod
    def _lexical_overlap(query_terms: dict[str, float], candidate: Candidate) -> float:
        return _coverage(query_terms, candidate.terms or frozenset(chunk_terms(candidate)))

    @staticmethod
    def _document_similarities(
        index: L0Index, candidates: list[Candidate], query_embedding: Embedding
    ) -> dict[str, float]:
        query = np.asarray(query_embedding, dtype=np.float32)
        scores = {}
        for source in {c.source for c in candidates}:
            vector = index.summary_vector(source)
            if vector is not None:
                scores[source] = max(0.0, float(np.dot(query, vector)))
        return scores

    @staticmethod
    def _hint_reasons(candidate: Candidate, facts: _QueryFacts) -> list[str]:
        reasons = []
        if candidate.source in facts.named_sources:
            reasons.append(f"l0_name: {PurePosixPath(candidate.source).stem}")
        if candidate.title in facts.matched_titles:
            reasons.append(f"l0_title: {candidate.title}")
        reasons.extend(f"l0_keyword: {k}" for k in candidate.keywords if fold(k) in facts.matched_keywords)
        reasons.extend(f"l0_entity: {e}" for e in candidate.entities if e in facts.matched_entities)
        if candidate.category in facts.domains:
            reasons.append(f"l0_domain: {candidate.category}")
        return [r for r in reasons if r not in candidate.hit_reasons]


def _document_support(candidates: list[Candidate], evidence_bar: EvidenceBar) -> Counter:
    """Per source, its distinct candidates at or above the configured threshold."""
    return Counter(
        c.source for c in {c.evidence_key: c for c in candidates}.values() if c.similarity >= evidence_bar.configured
    )


def chunk_terms(candidate: Candidate) -> list[str]:
    """The comparable terms of a chunk with its title, breadcrumb and keywords (also stored at index time)."""
    text = " ".join(
        filter(None, [candidate.title, candidate.breadcrumb, " ".join(candidate.keywords), candidate.content])
    )
    return sorted(set(terms(text)))


def _coverage(query_terms: dict[str, float], present: set[str] | frozenset[str]) -> float:
    """IDF-weighted share of the query's terms found in a set of terms."""
    total = sum(query_terms.values())
    if not total:
        return 0.0
    return sum(weight for term, weight in query_terms.items() if term in present) / total


def _keyword_share(candidate: Candidate, matched_keywords: set[str]) -> float:
    if not matched_keywords or not candidate.keywords:
        return 0.0
    hits = sum(1 for keyword in candidate.keywords if fold(keyword) in matched_keywords)
    return min(1.0, hits / 2)
