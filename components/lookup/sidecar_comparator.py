import logging
from collections.abc import Sequence
from typing import Any

from haystack import component

from components.common.choices import check_at_least, check_choice, check_flags
from components.common.decision_scale import ranking_similarity
from components.contracts import Candidate, RetrievalTrace, SidecarReport
from components.stores.knowledge_store import KnowledgeStore, check_store
from components.stores.vector_search import PATHS, Embedding, VectorSearch

logger = logging.getLogger(__name__)

_PREVIEW_CHARS = 160
OTHER_PATH = "other"


def comparable(candidates: list[Candidate], limit: int) -> list[dict[str, Any]]:
    """Candidates in the comparable shape: identity, metadata, rank, preview and per-path score semantics."""
    rows = []
    for rank, candidate in enumerate(candidates[:limit], start=1):
        rows.append(
            {
                "rank": rank,
                "evidence_key": candidate.evidence_key,
                "source": candidate.source,
                "title": candidate.title,
                "breadcrumb": candidate.breadcrumb,
                "category": candidate.category,
                "content_preview": candidate.content[:_PREVIEW_CHARS],
                "path": candidate.path,
                "score_label": candidate.raw_score_label,
                "score_value": candidate.raw_score,
                "similarity": ranking_similarity(candidate),  # the searched model's, as the other path's
            }
        )
    return rows


RBO_P = 0.9


def overlap_at_k(main: Sequence[str], side: Sequence[str], k: int) -> float:
    """Share of the first `k` keys of `main` that are also among the first `k` of `side` (0 when k <= 0)."""
    if k <= 0:
        return 0.0
    return len(set(main[:k]) & set(side[:k])) / k


def jaccard(main: Sequence[str], side: Sequence[str]) -> float:
    """|A & B| / |A | B| of the two key sets; two empty lists agree fully (1.0)."""
    union = set(main) | set(side)
    return len(set(main) & set(side)) / len(union) if union else 1.0


def rank_biased_overlap(main: Sequence[str], side: Sequence[str], p: float = RBO_P) -> float:
    """
    Rank-biased overlap of two rankings (Webber et al. 2010), the extrapolated form `RBO_ext` for
    lists of equal depth: (1 - p) * sum_{d<k} p^(d-1) * A_d + p^(k-1) * A_k, where A_d is the overlap
    at depth d over d. Lists are cut to the shorter one's depth; two empty lists give 1.0.
    """
    depth = min(len(main), len(side))
    if depth == 0:
        return 1.0 if not main and not side else 0.0
    seen_main: set[str] = set()
    seen_side: set[str] = set()
    shared = 0
    total = 0.0
    agreement = 0.0
    for d in range(1, depth + 1):
        a, b = main[d - 1], side[d - 1]
        if a == b:
            shared += 1
        else:
            shared += (a in seen_side) + (b in seen_main)
        seen_main.add(a)
        seen_side.add(b)
        agreement = shared / d
        if d < depth:
            total += p ** (d - 1) * agreement
    return (1 - p) * total + p ** (depth - 1) * agreement


def top1_agreement(main: Sequence[str], side: Sequence[str]) -> bool:
    """Both lists have a first hit and it is the same."""
    return bool(main and side and main[0] == side[0])


def compare(main: list[dict[str, Any]], side: list[dict[str, Any]]) -> dict[str, Any]:
    """Agreement of two ranked lists: overlap, same top hit, rank shifts and similarity gaps."""
    main_rank = {r["evidence_key"]: r for r in main}
    side_rank = {r["evidence_key"]: r for r in side}
    main_keys = [r["evidence_key"] for r in main]
    side_keys = [r["evidence_key"] for r in side]
    shared = [key for key in main_rank if key in side_rank]
    depth = max(len(main), len(side), 1)
    gaps = [abs(main_rank[k]["similarity"] - side_rank[k]["similarity"]) for k in shared]
    return {
        "depth": depth,
        "overlap": len(shared),
        "overlap_ratio": round(len(shared) / depth, 4),
        "overlap_at_k": round(overlap_at_k(main_keys, side_keys, depth), 4),
        "jaccard": round(jaccard(main_keys, side_keys), 4),
        "rbo": round(rank_biased_overlap(main_keys, side_keys), 4),
        "same_top1": top1_agreement(main_keys, side_keys),
        "max_rank_shift": max((abs(main_rank[k]["rank"] - side_rank[k]["rank"]) for k in shared), default=0),
        "mean_similarity_gap": round(sum(gaps) / len(gaps), 6) if gaps else 0.0,
        "max_similarity_gap": round(max(gaps, default=0.0), 6),
        "score_semantics": {
            "main": main[0]["score_label"] if main else None,
            "sidecar": side[0]["score_label"] if side else None,
            "comparable_by": "similarity (the same normalization on both paths); raw scores differ in meaning",
        },
    }


@component
class SidecarComparator:
    """
    Runs the other vector-store path beside the main one, for the selected attempt, and reports
    a side-by-side comparison. Disabled by default; when enabled, its failure (the path cannot
    initialise or query) is reported as the sidecar status and never fails the lookup.

    Usage example:

    ```python
    >>> import tempfile
    >>> from haystack import Document
    >>> from components.contracts import IndexPlan, L0Hints, QueryTransform
    >>> from components.indexing.milvus_writer import MilvusChunkWriter
    >>> from components.lookup.fallback_retriever import FallbackRetriever
    >>> store = KnowledgeStore(uri=f"{tempfile.mkdtemp()}/milvus.db", collection="knowledge")
    >>> def chunk(source, vector):  # 4-d embeddings here
    ...     meta = {"source": source, "evidence_key": f"{source}#0", "category": source.split("/")[0]}
    ...     return Document(content=f"what to do about {source}", embedding=vector, meta=meta)
    >>> chunks = [chunk("disk/full.md", [1.0, 0.0, 0.0, 0.0]), chunk("db/lag.md", [0.0, 1.0, 0.0, 0.0])]
    >>> _ = MilvusChunkWriter(store=store).run(documents=chunks, plan=IndexPlan())
    >>> q = [0.8, 0.6, 0.0, 0.0]
    >>> qt = QueryTransform(raw="disk full", normalized="disk full", variants=["disk full"])
    >>> main = FallbackRetriever(store=store).run(query_transform=qt, hints=L0Hints(), query_embedding=q)
    >>> sidecar = SidecarComparator(store=store, enabled=True, path="haystack")
    >>> report = sidecar.run(query_embedding=q, candidates=main["candidates"], retrieval_trace=main["retrieval_trace"])
    >>> report["sidecar"].status, report["sidecar"].comparison["same_top1"]
    ('ok', True)

    ```
    """

    def __init__(self, store: KnowledgeStore, enabled: bool = False, path: str = "other", top_k: int = 20) -> None:
        """
        :param store: The Milvus collection (`KnowledgeStore`) both paths search.
        :param enabled: Run the sidecar at all.
        :param path: The sidecar's vector-store path: "other" (the path the main lookup did not use),
            "haystack" or "sdk".
        :param top_k: Results compared per path.
        """
        check_store(store)
        check_flags(enabled=enabled)
        check_choice("path", path, (OTHER_PATH, *PATHS))
        check_at_least(1, top_k=top_k)
        self.store = store
        self.enabled = enabled
        self.path = path
        self.top_k = top_k
        self._searches: dict[str, VectorSearch] = {}

    @component.output_types(sidecar=SidecarReport)
    def run(
        self,
        query_embedding: Embedding | None = None,
        expanded_query_embedding: Embedding | None = None,
        candidates: list[Candidate] | None = None,
        retrieval_trace: RetrievalTrace | None = None,
    ) -> dict[str, Any]:
        """
        The inputs are optional so that a pipeline with the sidecar disabled need not connect
        them: Haystack deep-copies every connected input, a cost for nothing when it is off.

        :param query_embedding: The query's embedding (as given to the retriever).
        :param expanded_query_embedding: The expanded query's (as given to the retriever).
        :param candidates: The main path's candidates.
        :param retrieval_trace: The main path's trace (its selected attempt is replayed).
        :returns: `sidecar`, a `SidecarReport` (status "disabled" when off).
        """
        if not self.enabled:
            return {"sidecar": SidecarReport(status="disabled")}
        selected = (
            retrieval_trace.attempts[retrieval_trace.selected_attempt]
            if retrieval_trace is not None
            and retrieval_trace.selected_attempt is not None
            and query_embedding is not None
            else None
        )
        candidates = candidates or []
        if selected is None:
            return {"sidecar": SidecarReport(status="skipped", path=self.path, error="no main retrieval attempt")}
        path = self._side_path(selected.path)
        # The embedding of the attempt replayed: the retry searches with the plain query's.
        expanded = query_embedding if expanded_query_embedding is None else expanded_query_embedding
        embedding = query_embedding if selected.index > 0 else expanded
        main = sorted((c for c in candidates if c.attempt == selected.index), key=lambda c: -ranking_similarity(c))
        try:
            if path not in self._searches:
                self._searches[path] = self.store.vector_search(path)
            side = self._searches[path].search(embedding, self.top_k, selected.category_filter)
        except Exception as exc:  # the sidecar must never break the main lookup
            self._searches.pop(path, None)
            logger.warning("Sidecar path %s failed: %s", path, exc)
            return {
                "sidecar": SidecarReport(
                    status="error", path=path, main_path=selected.path, error=f"{type(exc).__name__}: {exc}"
                )
            }
        main_rows = comparable(main, self.top_k)
        side_rows = comparable(side, self.top_k)
        return {
            "sidecar": SidecarReport(
                status="ok",
                path=path,
                main_path=selected.path,
                results=side_rows,
                comparison=compare(main_rows, side_rows),
            )
        }

    def _side_path(self, main_path: str) -> str:
        if self.path != OTHER_PATH:
            return self.path
        return next(p for p in PATHS if p != main_path)
