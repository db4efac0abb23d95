from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any

import numpy as np
from haystack import component

from components.common.choices import DEFAULT_RERANK_WEIGHTS, check_named, check_rerank_weights
from components.common.decision_scale import ranking_similarity
from components.common.evidence import EvidenceBar
from components.common.text import fold, terms
from components.contracts import Candidate, L0Hints, QueryTransform
from components.stores.l0_index import L0Index
from components.stores.l0_index_file import L0IndexHandle
from components.stores.vector_search import Embedding

# What a query asks for, by words it uses; matched against the kind of a chunk's section.
_INTENTS: dict[str, tuple[str, ...]] = {
    "mitigation": (
        "fix",
        "resolve",
        "mitigate",
        "remediate",
        "solve",
        "recover",
        "workaround",
        "what to do",
        "how do i",
        "how to",
        "处理",
        "解决",
        "怎么办",
        "恢复",
    ),
    "diagnosis": (
        "why",
        "diagnose",
        "investigate",
        "debug",
        "root cause",
        "cause",
        "troubleshoot",
        "check",
        "原因",
        "排查",
        "诊断",
    ),
    "overview": ("what is", "what does", "meaning", "mean", "explain", "是什么", "含义"),
    "impact": ("impact", "affect", "consequence", "影响"),
}
_SUPPORT_SATURATION = 3


def query_intents(query: str) -> set[str]:
    folded = fold(query)
    return {kind for kind, markers in _INTENTS.items() if any(marker in folded for marker in markers)}


# The sections a query needs of its document when it names no intent: an alert text or a bare
# symptom needs what to do about it.
DEFAULT_NEEDED_SECTIONS = frozenset({"mitigation"})


def needed_section_kinds(query: str) -> set[str]:
    """The section kinds a query needs of its leading document: those it asks for, else the mitigation."""
    return query_intents(query) or set(DEFAULT_NEEDED_SECTIONS)


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
    >>> import tempfile
    >>> from components.common.evidence import EvidenceBar
    >>> from components.contracts import Candidate, L0Hints, QueryTransform
    >>> from components.stores.l0_index import L0Index
    >>> from components.stores.l0_index_file import save_l0_index
    >>> path = f"{tempfile.mkdtemp()}/kb.l0.json"
    >>> save_l0_index(L0Index([], term_df={"disk": 1, "space": 1}), path)  # the idf of the query's terms
    >>> def chunk(key, source, text, similarity):
    ...     return Candidate(key, source, text, similarity, 2 - 2 * similarity, "l2", "sdk")
    >>> candidates = [chunk("a#0", "a.md", "restart the service", 0.62), chunk("b#0", "b.md", "free disk space", 0.6)]
    >>> qt = QueryTransform(raw="disk space", normalized="disk space", variants=["disk space"])
    >>> reranker = RuleReranker(l0_index_path=path, weights={"lexical_overlap": 0.3})
    >>> ranked = reranker.run(query_transform=qt, hints=L0Hints(), candidates=candidates, query_embedding=[0.0] * 384,
    ...                       evidence_bar=EvidenceBar(configured=0.35, applied=0.35))["candidates"]
    >>> [(c.evidence_key, c.boosts) for c in ranked]
    [('b#0', {'lexical_overlap': 0.3}), ('a#0', {})]

    ```
    """

    def __init__(
        self,
        l0_index_path: str,
        weights: Mapping[str, float] | None = MappingProxyType(DEFAULT_RERANK_WEIGHTS),
    ) -> None:
        """
        :param l0_index_path: The L0 index (summary vectors, term statistics, document metadata).
        :param weights: Signal weights; missing signals take the defaults, 0 turns one off.
        """
        check_named(l0_index_path=l0_index_path)
        check_rerank_weights(weights or {})
        self.l0_index_path = l0_index_path
        self.weights = {**DEFAULT_RERANK_WEIGHTS, **(weights or {})}
        self._l0 = L0IndexHandle(l0_index_path)

    @component.output_types(candidates=list[Candidate])
    def run(
        self,
        query_transform: QueryTransform,
        hints: L0Hints,
        candidates: list[Candidate],
        query_embedding: Embedding,
        evidence_bar: EvidenceBar,
    ) -> dict[str, Any]:
        """
        :param query_transform: The transformed query.
        :param hints: L0 hints of the query.
        :param candidates: Vector candidates (any order; duplicates allowed).
        :param query_embedding: The normalised query's embedding, compared with document summaries.
        :param evidence_bar: The retriever's; candidates at or above its configured threshold count
            as document support.
        :returns: The candidates sorted by final score, with `final_score`, `boosts` and hit reasons set.
        """
        if not candidates:
            return {"candidates": []}
        index = self._l0.get()
        query_term_set = set(terms(query_transform.normalized, drop_noise=True))
        query_terms = self._weighted_query_terms(index, query_term_set)
        intents = query_intents(query_transform.normalized)
        self._l0.check_dimension(index, len(query_embedding))
        document_scores = self._document_similarities(index, candidates, query_embedding)
        support = Counter(
            c.source
            for c in {c.evidence_key: c for c in candidates}.values()
            if c.similarity >= evidence_bar.configured
        )
        named_sources = set(hints.named_sources)
        matched_titles = set(hints.matched_titles)
        matched_keywords = {fold(k) for k in hints.matched_keywords}
        matched_entities = set(hints.entities)
        domains = set(hints.domains)
        best_bm25 = max((c.bm25_score or 0.0 for c in candidates), default=0.0)

        # Document-level signals are the same for every chunk of a source: computed once each.
        document_signals: dict[str, tuple[float, float]] = {}
        scored = []
        for candidate in candidates:
            source = candidate.source
            if source not in document_signals:
                document_signals[source] = (
                    index.title_overlap(source, query_term_set),
                    _coverage(query_terms, index.document_terms(source)),
                )
            title_overlap, document_lexical = document_signals[source]
            signals = {
                "similarity": ranking_similarity(candidate),  # the ranking model's, beside a decision model
                "document_similarity": document_scores.get(source, 0.0),
                "lexical_overlap": self._lexical_overlap(query_terms, candidate),
                "title_overlap": title_overlap,
                "document_lexical": document_lexical,
                "name_match": 1.0 if source in named_sources else 0.0,
                "title_match": 1.0 if candidate.title in matched_titles else 0.0,
                "keyword_match": _keyword_share(candidate, matched_keywords),
                "entity_match": 1.0 if matched_entities & set(candidate.entities) else 0.0,
                "domain_match": 1.0 if candidate.category in domains else 0.0,
                "section_match": 1.0 if candidate.section_kind in intents else 0.0,
                "document_support": min(1.0, max(0, support[candidate.source] - 1) / _SUPPORT_SATURATION),
                "bm25": (candidate.bm25_score or 0.0) / best_bm25 if best_bm25 > 0 else 0.0,
            }
            contributions = {name: self.weights[name] * value for name, value in signals.items()}
            reasons = self._hint_reasons(
                candidate, source in named_sources, matched_titles, matched_keywords, matched_entities, domains
            )
            # A new candidate: the caller's list (also read by other components) stays as it came.
            scored.append(
                replace(
                    candidate,
                    final_score=round(sum(contributions.values()), 6),
                    boosts={
                        name: round(value, 4)
                        for name, value in contributions.items()
                        if name != "similarity" and value > 0
                    },
                    hit_reasons=[*candidate.hit_reasons, *reasons],
                )
            )
        ranked = sorted(scored, key=lambda c: (-c.final_score, -c.similarity, c.evidence_key))
        return {"candidates": ranked}

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
    def _hint_reasons(
        candidate: Candidate, named: bool, titles: set[str], keywords: set[str], entities: set[str], domains: set[str]
    ) -> list[str]:
        reasons = []
        if named:
            reasons.append(f"l0_name: {PurePosixPath(candidate.source).stem}")
        if candidate.title in titles:
            reasons.append(f"l0_title: {candidate.title}")
        reasons.extend(f"l0_keyword: {k}" for k in candidate.keywords if fold(k) in keywords)
        reasons.extend(f"l0_entity: {e}" for e in candidate.entities if e in entities)
        if candidate.category in domains:
            reasons.append(f"l0_domain: {candidate.category}")
        return [r for r in reasons if r not in candidate.hit_reasons]


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
