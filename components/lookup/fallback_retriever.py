import logging
import time
from typing import Any

from haystack import component

from components.common.choices import (
    RetrievalLeg,
    VectorStoreMode,
    check_at_least,
    check_choice,
    check_flags,
    check_named,
    check_unit_interval,
)
from components.common.decision_scale import DEFAULT_DECISION_VECTORS
from components.common.evidence import EvidenceBar, usable
from components.contracts import Candidate, L0Hints, QueryTransform, RetrievalAttempt, RetrievalTrace
from components.errors import ComponentFailure, first_line
from components.lookup.fallback_policy import FallbackPolicy, FilteredFacts
from components.lookup.hybrid_scan import EXACT_INDEX_TYPES, HybridScan
from components.lookup.one_scan import OneScan
from components.lookup.resident_scan import ResidentScan
from components.lookup.retrieval_legs import DecisionScale, LegPool, PendingSearch, bm25_top_hits, merge_bm25, top_hits
from components.stores.knowledge_store import KnowledgeStore, check_store
from components.stores.milvus_collection import is_local_uri
from components.stores.milvus_deadline import lookup_deadline
from components.stores.vector_search import (
    Bm25Hit,
    Embedding,
    NoFullTextError,
    UnsupportedFilterError,
    VectorSearch,
)

logger = logging.getLogger(__name__)

MODES = VectorStoreMode.values()
DENSE = RetrievalLeg.dense.value
BM25 = RetrievalLeg.bm25.value
BM25_OFF = "disabled: retrieval.bm25_top_k=0"
BM25_CANNOT_CHANGE = "not run: the exact dense leg found nothing usable in this filtered attempt, so it is retried"


@component
class FallbackRetriever:
    """
    L1 retrieval (dense vectors, plus Milvus's BM25 full-text leg) with an optional L0 category
    filter and a traced unfiltered retry.

    - Exactly one nonblank L0 domain: a first attempt filtered on the `category` column.
      Zero or several domains: one attempt without an L0-derived filter.
    - Each attempt runs the dense leg (`top_k`) and, on a collection with the BM25 `sparse` field,
      the BM25 leg (`bm25_top_k`, same filter and text); candidates are their union by chunk id. A
      chunk only BM25 found gets its similarity from its stored vector, so every threshold uses the
      dense similarity; its BM25 score and rank are recorded apart (`bm25_score`, `bm25_rank`, a
      `bm25:` hit reason). The trace says which legs ran and why BM25 did not (`legs`, `bm25_skipped`,
      also when an exact dense leg found nothing usable: `_bm25_cannot_change`).
    - A filtered attempt is retried unfiltered with the raw query when `FallbackPolicy`
      (components/lookup/fallback_policy.py) says why: no evidence, low quality or outscored.
    - On an exact index, one scan serves the filtered attempt, the outscored check and the retry:
      the collection in memory (an unfiltered lookup's attempt too), or a scan in Milvus
      (components/lookup/one_scan.py); else each searches apart.
    - After a retry the candidates of both attempts go on together (the deduper merges a chunk
      found by both, keeping both hit reasons); the unfiltered attempt is the selected one.
    - When the L0 hints name words the knowledge base never uses (`hints.uncovered_terms`), a
      candidate needs `uncovered_evidence_threshold` instead of `evidence_threshold` to be usable:
      the bar applied is recorded in the trace (`evidence_threshold`) for the deduper.

    `vector_store_mode` picks the path: `sdk`, `haystack`, or `auto` (haystack, then sdk when it
    cannot initialise or fails). Every attempt is recorded in the `RetrievalTrace`.

    Usage example:

    ```python
    >>> import tempfile
    >>> from haystack import Document
    >>> from components.contracts import IndexPlan, L0Hints, QueryTransform
    >>> from components.indexing.milvus_writer import MilvusChunkWriter
    >>> store = KnowledgeStore(uri=f"{tempfile.mkdtemp()}/milvus.db", collection="knowledge")
    >>> def chunk(source, vector):  # 4-d embeddings here
    ...     meta = {"source": source, "evidence_key": f"{source}#0", "category": source.split("/")[0]}
    ...     return Document(content=f"what to do about {source}", embedding=vector, meta=meta)
    >>> chunks = [chunk("disk/full.md", [1.0, 0.0, 0.0, 0.0]), chunk("db/lag.md", [0.0, 1.0, 0.0, 0.0])]
    >>> _ = MilvusChunkWriter(store=store).run(documents=chunks, plan=IndexPlan())
    >>> retriever = FallbackRetriever(store=store)
    >>> qt = QueryTransform(raw="disk full", normalized="disk full", variants=["disk full"])
    >>> out = retriever.run(query_transform=qt, hints=L0Hints(domains=["disk"]), query_embedding=[0.8, 0.6, 0.0, 0.0])
    >>> [(c.source, round(c.similarity, 3)) for c in out["candidates"]]
    [('disk/full.md', 0.8)]
    >>> attempt = out["retrieval_trace"].attempts[0]
    >>> attempt.category_filter, attempt.outcome, out["evidence_bar"].applied
    ('disk', 'selected', 0.35)

    ```
    """

    def __init__(
        self,
        store: KnowledgeStore,
        top_k: int = 20,
        reference_threshold: float = 0.5,
        evidence_threshold: float = 0.35,
        l1_enabled: bool = True,
        vector_store_mode: str = "sdk",
        uncovered_evidence_threshold: float | None = 0.52,
        category_filter: bool = True,
        bm25_top_k: int = 20,
        outscored_margin: float = 0.05,
        outscored_check_below: float = 1.0,
        calibration: str = "conf",
        raise_on_failure: bool = True,
        decision_model: str | None = None,
        decision_vectors: str | None = DEFAULT_DECISION_VECTORS,
        scan_depth: int = 0,
        decision_scope: str = "answer",
        resident_max_chunks: int = 20000,
    ) -> None:
        """
        :param store: The Milvus collection (`KnowledgeStore`) and how to search it.
        :param top_k: Candidates per attempt.
        :param reference_threshold: Minimum top similarity for a filtered attempt to stand.
        :param evidence_threshold: Minimum similarity of a usable candidate.
        :param l1_enabled: False skips vector retrieval entirely (then nothing is evidence).
        :param vector_store_mode: "sdk", "haystack" or "auto".
        :param uncovered_evidence_threshold: Minimum similarity of a usable candidate when the query
            names something the knowledge base never mentions (None: `evidence_threshold` always).
        :param category_filter: False never filters on the L0 domain (one unfiltered attempt); the
            hints still set the evidence bar. For ablations.
        :param bm25_top_k: Candidates of the BM25 full-text leg per attempt (0: dense only).
        :param outscored_margin: Retry a filtered attempt whose top similarity the unfiltered dense
            search beats by at least this (1 or more: never; each filtered attempt then costs no
            unfiltered search).
        :param outscored_check_below: Only a filtered attempt whose top similarity is under this
            gets the unfiltered check (1: every one).
        :param calibration: Where the thresholds came from (`retrieval.calibration` as loaded), for the trace.
        :param raise_on_failure: False returns a search that fails as the `failure` output (a
            `ComponentFailure` with the `retrieval_trace` of the attempts that ran) instead of
            raising it, so that whoever records the failed lookup keeps those attempts.
        :param decision_model: The model that decides while the query embedding's model ranks (None: the same).
        :param decision_vectors: Its vectors of the indexed chunks (`.npz`; unused without `decision_model`).
        :param scan_depth: Hits per leg of a filtered lookup's one scan on an exact index (0: no scan).
        :param decision_scope: What it decides: "answer", only answer vs no evidence; "all", every threshold.
        :param resident_max_chunks: On Milvus Lite, the most chunks held in memory to serve the legs (0: none).
        """
        check_store(store)
        check_choice("vector_store_mode", vector_store_mode, MODES)
        check_flags(l1_enabled=l1_enabled, category_filter=category_filter, raise_on_failure=raise_on_failure)
        check_named(calibration=calibration)
        check_unit_interval(
            reference_threshold=reference_threshold,
            evidence_threshold=evidence_threshold,
            **(
                {}
                if uncovered_evidence_threshold is None
                else {"uncovered_evidence_threshold": uncovered_evidence_threshold}
            ),
        )
        check_at_least(1, top_k=top_k)
        check_at_least(0, bm25_top_k=bm25_top_k, scan_depth=scan_depth, resident_max_chunks=resident_max_chunks)
        self.store = store
        self.top_k = top_k
        self.reference_threshold = reference_threshold
        self.evidence_threshold = evidence_threshold
        self.l1_enabled = l1_enabled
        self.vector_store_mode = vector_store_mode
        self.uncovered_evidence_threshold = uncovered_evidence_threshold
        self.category_filter = category_filter
        self.bm25_top_k = bm25_top_k
        self.outscored_margin = outscored_margin
        self.outscored_check_below = outscored_check_below
        self.scan_depth, self.resident_max_chunks = scan_depth, resident_max_chunks
        self._one_scan = OneScan(scan_depth, resident_max_chunks, top_k, bm25_top_k)
        self.policy = FallbackPolicy(reference_threshold, outscored_margin, outscored_check_below)  # checks them
        self.calibration = calibration
        self.raise_on_failure = raise_on_failure
        self.decision_model, self.decision_vectors = decision_model, decision_vectors
        self.decision_scope = decision_scope
        self._scale = DecisionScale(decision_model, decision_vectors, decision_scope)
        self._searches: dict[str, VectorSearch] = {}
        self._legs = LegPool()

    def _search(self, path: str) -> VectorSearch:
        if path not in self._searches:
            self._searches[path] = self.store.vector_search(path)
        return self._searches[path]

    @component.output_types(
        candidates=list[Candidate], retrieval_trace=RetrievalTrace, evidence_bar=EvidenceBar, failure=ComponentFailure
    )
    def run(
        self,
        query_transform: QueryTransform,
        hints: L0Hints,
        query_embedding: Embedding,
        expanded_query_embedding: Embedding | None = None,
        decision_query_embedding: Embedding | None = None,
        expanded_decision_query_embedding: Embedding | None = None,
    ) -> dict[str, Any]:
        """
        :param query_transform: The transformed query (the expanded variant is the first attempt's).
        :param hints: L0 hints; `hints.single_domain` decides the filter.
        :param query_embedding: The normalised query's embedding (the unfiltered retry searches with it).
        :param expanded_query_embedding: The expanded query's, searched by the first attempt (the
            query's own when None).
        :param decision_query_embedding: The decision model's (and `expanded_decision_query_embedding`).
        :returns: `candidates` (in each attempt's order; after a retry, the retry's and the first
            attempt's usable ones), the `retrieval_trace` and the `evidence_bar` the components after
            it apply (the one place the evidence threshold enters); with `raise_on_failure=False`, a
            failed search returns only `failure` (the error and the attempts' `retrieval_trace`).
        """
        bar = self.evidence_bar(hints)
        evidence_bar = EvidenceBar(configured=self.evidence_threshold, applied=bar)
        trace = RetrievalTrace(
            vector_store_mode=self.vector_store_mode,
            l1_enabled=self.l1_enabled,
            evidence_threshold=bar,
            reference_threshold=self.reference_threshold,
            calibration=self.calibration
            if self.decision_model is None
            else f"{self.calibration} (decides: {self.decision_model}, scope: {self.decision_scope})",
        )
        if not self.l1_enabled:
            return {"candidates": [], "retrieval_trace": trace, "evidence_bar": evidence_bar}

        try:
            # One `milvus.timeout_ms` for every search of the lookup together (see milvus_deadline).
            with lookup_deadline(self.store.timeout_ms):
                expanded = query_embedding if expanded_query_embedding is None else expanded_query_embedding
                embeddings = self._scale.query_vectors(
                    query_embedding, expanded, decision_query_embedding, expanded_decision_query_embedding
                )
                found = self._attempts(query_transform, hints, self._scale.searched(embeddings), bar, trace)
                return {**self._scale.gated(found, embeddings, bar, trace), "evidence_bar": evidence_bar}
        except Exception as exc:
            if self.raise_on_failure:
                raise
            return {"failure": ComponentFailure(error=exc, outputs={"retrieval_trace": trace})}

    def _attempts(
        self, query_transform: QueryTransform, hints: L0Hints, embeddings, bar: float, trace
    ) -> dict[str, Any]:
        category = hints.single_domain if self.category_filter else None
        query = query_transform.retrieval_query
        scan = self._scan(query, embeddings.expanded, category is not None)
        dense, bm25 = (None, None) if scan is None else scan.first_legs(category)
        first, first_attempt = self._attempt(
            0, category, query, embeddings.expanded, bar, trace, dense, bm25, embeddings.decision_expanded
        )
        trace.attempts.append(first_attempt)
        trace.index_type = self._search(first_attempt.path).described_index_type
        reason, retry_legs = None, None
        if category is not None:
            facts = FilteredFacts(first_attempt.usable_count, first_attempt.top_similarity)
            unfiltered_top = None
            if self.policy.needs_unfiltered_top(facts):
                retry_legs = None if scan is not None else self._speculative_retry(query_transform, embeddings)
                unfiltered_top = self._unfiltered_top(first_attempt.path, embeddings, scan)
                first_attempt.unfiltered_top_similarity = unfiltered_top
            reason = self.policy.reason(facts, unfiltered_top)
        if reason is None:
            first_attempt.outcome = "selected"
            trace.selected_attempt = 0
            return {"candidates": first, "retrieval_trace": trace}

        first_attempt.outcome = f"retried: {reason}"
        dense, bm25 = retry_legs or ((None, None) if scan is None else scan.retry_legs(query_transform, embeddings))
        retry, retry_attempt = self._attempt(
            1, None, query_transform.normalized, embeddings.query, bar, trace, dense, bm25, embeddings.decision_query
        )
        retry_attempt.outcome = "selected"
        trace.attempts.append(retry_attempt)
        trace.selected_attempt = 1
        trace.fallback_reason = reason
        logger.info("Filtered attempt on category %r retried without filter: %s", category, reason)
        # The first attempt's unusable candidates could never become evidence: only its usable
        # ones go on, to merge with the retry's (a chunk found by both keeps both hit reasons).
        return {"candidates": retry + usable(first, bar), "retrieval_trace": trace}

    def _scan(self, query: str, embedding: Embedding, filtered: bool) -> HybridScan | ResidentScan | None:
        """The lookup's one scan on the sdk path of an open collection (components/lookup/one_scan.py)."""
        if self._warm_path() != "sdk":
            return None
        return self._one_scan.start(self._search("sdk"), query, embedding, filtered)

    def _unfiltered_top(self, path: str, embeddings, scan: HybridScan | ResidentScan | None) -> float:
        """The best unfiltered similarity: on the decision scale, from the scan, or by a search of one hit."""
        best = self._scale.best(embeddings)
        if best is None:
            best = scan.top_similarity() if scan else self._search(path).top_similarity(embeddings.expanded, None)
        return best

    def _speculative_retry(
        self, query_transform: QueryTransform, embeddings
    ) -> tuple[PendingSearch, PendingSearch] | None:
        """
        On a Milvus server, the unfiltered retry's two legs started beside the outscored check
        (they do not depend on it): a retry then waits for one round of searches, not two. Its
        results are dropped when the filtered attempt stands. Not on Milvus Lite (see `_start_bm25`).
        """
        path = self._warm_path()
        if path is None or is_local_uri(self.store.uri):
            return None
        dense = PendingSearch(self._legs.submit(self._search_with_mode, embeddings.query, None), path)
        return dense, self._start_bm25(None, query_transform.normalized, embeddings.query)

    def _warm_path(self) -> str | None:
        """The path the next search takes, once its collection is open (None before: searches stay serial)."""
        path = "haystack" if self.vector_store_mode == "auto" else self.vector_store_mode
        search = self._searches.get(path)
        return path if search is not None and search.known_layout is not None else None

    def _start_bm25(self, category: str | None, query: str, embedding: list[float]) -> PendingSearch:
        """
        The BM25 leg started beside the dense one, on a Milvus server, when it will run on an open
        collection with full text. Not on Milvus Lite: its searches run in this process and hold
        its interpreter, so side by side they only slowed each other (docs/benchmarks.md).
        """
        path = self._warm_path()
        if path is None or self.bm25_top_k <= 0 or is_local_uri(self.store.uri):
            return PendingSearch(None)
        if not self._search(path).known_layout.has_sparse:
            return PendingSearch(None)
        search = self._search(path)
        return PendingSearch(self._legs.submit(search.bm25_search, query, embedding, self.bm25_top_k, category), path)

    def evidence_bar(self, hints: L0Hints) -> float:
        """The similarity a candidate needs to be usable evidence for a query with these hints."""
        if hints.uncovered_terms and self.uncovered_evidence_threshold is not None:
            return max(self.evidence_threshold, self.uncovered_evidence_threshold)
        return self.evidence_threshold

    def _attempt(
        self,
        index: int,
        category: str | None,
        query: str,
        embedding: list[float],
        bar: float,
        trace: RetrievalTrace,
        dense: PendingSearch | None = None,
        bm25: PendingSearch | None = None,
        decision: Embedding | None = None,
    ) -> tuple[list[Candidate], RetrievalAttempt]:
        """
        One attempt: the dense leg and the BM25 leg side by side (`dense` and `bm25` when they were
        started already), merged. The BM25 leg's hits are used only when it ran on the path the
        dense leg took and could change something; otherwise it runs again there, or not at all.
        """
        started_ns = time.time_ns()
        bm25 = bm25 or self._start_bm25(category, query, embedding)
        candidates, path, note = self._dense_leg(dense, embedding, category)
        candidates = self._scale.apply(candidates, decision)
        dense_top = top_hits(DENSE, candidates)
        where = f"{path} attempt {index} ({'category=' + repr(category) if category else 'unfiltered'})"
        for candidate in candidates:
            candidate.attempt = index
            candidate.hit_reasons.append(f"vector:{where}")
        legs = [DENSE]
        exact = category and decision is None and self._bm25_cannot_change(path, candidates, bar)  # same scale only
        skipped = BM25_CANNOT_CHANGE if exact else None
        hits = None if skipped else self._bm25_leg(path, query, embedding, category, trace, bm25)
        bm25_only: list[Candidate] = []
        if hits is not None:
            legs.append(BM25)
            bm25_only = self._scale.apply(merge_bm25(candidates, hits, index, f"bm25:{where}"), decision)
            candidates = candidates + bm25_only
        trace.legs = [leg for leg in (DENSE, BM25) if leg in trace.legs or leg in legs]
        good = usable(candidates, bar)
        attempt = RetrievalAttempt(
            index=index,
            category_filter=category,
            filter_expression=self._search(path).describe_filter(category),
            query=query,
            path=path,
            candidate_count=len(candidates),
            usable_count=len(good),
            top_similarity=max((c.similarity for c in candidates), default=None),
            outcome="pending",
            error=note,
            legs=legs,
            bm25_count=None if hits is None else len(hits),
            bm25_only_count=None if hits is None else len(bm25_only),
            bm25_skipped=skipped,
            top_hits=dense_top + bm25_top_hits(hits or []),
            started_ns=started_ns,
            ended_ns=time.time_ns(),
        )
        return candidates, attempt

    def _dense_leg(
        self, started: PendingSearch | None, embedding: list[float], category: str | None
    ) -> tuple[list[Candidate], str, str | None]:
        """The dense leg's candidates, path and note: of its search started already, else of one run now."""
        if started is not None and started.future is not None:
            return started.result()
        return self._search_with_mode(embedding, category)

    def _bm25_cannot_change(self, path: str, dense: list[Candidate], bar: float) -> bool:
        """
        Whether a filtered attempt's BM25 leg could change nothing: its exact dense leg found no usable
        candidate, so no chunk scores higher and the attempt is retried (`filtered_vector_no_evidence`)
        whatever the leg found, and none of its candidates goes on. The retry runs both legs.
        """
        search = self._search(path)
        if self.bm25_top_k <= 0 or not search.layout.has_sparse or search.described_index_type not in EXACT_INDEX_TYPES:
            return False  # the leg would not run, or an approximate index may have missed a better chunk
        return not usable(dense, bar)

    def _bm25_leg(
        self,
        path: str,
        query: str,
        embedding: list[float],
        category: str | None,
        trace: RetrievalTrace,
        started: PendingSearch,
    ) -> list[Bm25Hit] | None:
        """The BM25 leg's hits, or None when it cannot run here (the reason goes to `trace.bm25_skipped`)."""
        if self.bm25_top_k <= 0:
            trace.bm25_skipped = BM25_OFF
            return None
        try:
            if started.future is not None and started.path == path:
                return started.result()
            return self._search(path).bm25_search(query, embedding, self.bm25_top_k, category)
        except NoFullTextError as exc:
            trace.bm25_skipped = str(exc)
            logger.info("BM25 leg skipped on collection %s: %s", self.store.collection, exc)
            return None

    def _search_with_mode(
        self, embedding: list[float], category: str | None
    ) -> tuple[list[Candidate], str, str | None]:
        if self.vector_store_mode != "auto":
            path = self.vector_store_mode
            try:
                return self._search(path).search(embedding, self.top_k, category), path, None
            except UnsupportedFilterError as exc:  # this collection's filter needs the SDK path
                note = f"{path} path cannot filter, used sdk: {exc}"
                logger.info("Vector store %s mode: %s", path, note)
                return self._search("sdk").search(embedding, self.top_k, category), "sdk", note
        try:
            return self._search("haystack").search(embedding, self.top_k, category), "haystack", None
        except Exception as exc:  # auto mode: any failure of the framework path falls back to the SDK
            self._searches.pop("haystack", None)
            note = f"haystack path failed, used sdk: {type(exc).__name__}: {first_line(exc)}"
            logger.warning("Vector store auto mode: %s", note)
            return self._search("sdk").search(embedding, self.top_k, category), "sdk", note
