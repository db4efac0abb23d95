"""
A filtered and a fallback lookup stage by stage (`knowledge bench lookup --profile N`): the
median of each pipeline component's wall time (Haystack's component spans, through
`stage_recorder`) and, inside the retriever, of each Milvus search it waits on, by leg and scope
(the one scan of an exact index too, and the chunks it fetches by key; or the dense and BM25 legs
served from the collection in memory and the check that it is current), with the searches per
lookup (a scan counts one per leg; a fetch by key, a leg in memory and the check are no search).
The retriever's wall time minus the sum of its searches is its own row: its own work (merging,
scoring stored vectors) when the searches run one after another, negative when they overlap.
"""

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from components.common.stats import percentile
from pipelines.bench.machine import call_ms

# The retriever's Milvus calls, by method of `VectorSearch`, as the table names them.
SEARCH_METHODS = {"search": "dense search", "bm25_search": "BM25 search", "top_similarity": "outscored check"}
SCAN_LABEL, CHUNKS_LABEL = "retriever: scan (dense + BM25), unfiltered", "retriever: chunks fetched by key"
IN_MEMORY_LABEL, CURRENT_LABEL = "retriever: dense leg in memory", "retriever: in memory, checked current"
BM25_IN_MEMORY_LABEL = "retriever: BM25 leg in memory"
SEARCHES = "searches per lookup (a scan: one per leg)"
RETRIEVER = "retriever"
TOTAL = "lookup (LookupService.lookup)"
OWN = "retriever minus the sum of its searches (negative: searches overlapped)"


class SearchTimer:
    """Wraps the methods of the retriever's vector searches to time each call (also in its leg threads)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []
        self.searches = 0
        self._lock = threading.Lock()

    def wrap(self, search) -> None:
        for method, label in SEARCH_METHODS.items():
            setattr(search, method, self._timed(getattr(search, method), label))

    def wrap_light_scan(self) -> None:
        """
        Time the light scans and chunk fetches of every `LightScan`, and the dense and BM25 legs in
        memory of every `ResidentScan` (this process is the bench's own).
        """
        from components.lookup.resident_scan import ResidentScan
        from components.stores.light_scan import LightScan
        from components.stores.resident_rows import ResidentCollection

        for owner, method, label, searches in (
            (LightScan, "scan", SCAN_LABEL, lambda args: 1 + bool(args[-1])),
            (LightScan, "chunks", CHUNKS_LABEL, None),
            (ResidentScan, "_dense", IN_MEMORY_LABEL, None),
            (ResidentCollection, "bm25_hits", BM25_IN_MEMORY_LABEL, None),
            (ResidentCollection, "current", CURRENT_LABEL, None),
        ):
            plain = getattr(getattr(owner, method), "__wrapped__", getattr(owner, method))
            setattr(owner, method, self._timed(plain, label, searches or (lambda args: 0)))

    def _timed(self, method: Callable, label: str, searches: Callable | None = None) -> Callable:
        def timed(*args, **kwargs):
            category = args[-1] if args else kwargs.get("category")
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                name = label if searches else f"retriever: {label}, {'filtered' if category else 'unfiltered'}"
                with self._lock:
                    self.calls.append((name, (time.perf_counter() - started) * 1000))
                    self.searches += searches(args) if searches else 1

        timed.__wrapped__ = method
        return timed


def instrument(service) -> SearchTimer:
    """Time every Milvus call of the service's retriever (its searches are opened here, once)."""
    from components.tracing import stage_recorder

    stage_recorder.install()
    retriever = service.pipeline.get_component(RETRIEVER)
    timer = SearchTimer()
    # Only the paths the retriever uses: the haystack path's outscored check runs its dense search.
    mode = retriever.vector_store_mode
    for path in ("sdk", "haystack") if mode == "auto" else (mode,):
        timer.wrap(retriever._search(path))
    timer.wrap_light_scan()
    return timer


def profile_lookup(service, timer: SearchTimer, query: str) -> dict[str, float]:
    """One lookup's stages in ms: each component, each retriever search, the retriever's own work."""
    from components.tracing import stage_recorder

    timer.calls.clear()
    timer.searches = 0
    _, total_ms = call_ms(lambda: service.lookup(query))
    stages: dict[str, float] = {TOTAL: total_ms, SEARCHES: timer.searches}
    recording = stage_recorder.last_recording()
    for stage in recording.stages if recording else ():
        if stage.end_ns is not None:
            stages[stage.name] = stages.get(stage.name, 0.0) + (stage.end_ns - stage.start_ns) / 1e6
    for label, ms in timer.calls:
        stages[label] = stages.get(label, 0.0) + ms
    searches = sum(ms for _, ms in timer.calls)
    if RETRIEVER in stages:
        stages[OWN] = stages[RETRIEVER] - searches
    return stages


def profile_paths(service, cases_by_path: dict[str, Sequence[Any]]) -> dict[str, dict[str, float]]:
    """The p50 of every stage, per path; a stage a path never ran is absent from its column."""
    timer = instrument(service)
    table: dict[str, dict[str, float]] = {}
    for path, cases in cases_by_path.items():
        samples: dict[str, list[float]] = {}
        for case in cases:
            for stage, ms in profile_lookup(service, timer, case.query).items():
                samples.setdefault(stage, []).append(ms)
        table[path] = {
            stage if len(values) == len(cases) else f"{stage} (in {len(values)} of {len(cases)})": round(
                percentile(values, 0.5), 2
            )
            for stage, values in samples.items()
        }
    return table


def format_profile(table: dict[str, dict[str, float]], runs: int) -> str:
    paths = list(table)
    order: list[str] = []
    for column in table.values():
        order += [stage for stage in column if stage not in order]
    lines = [
        f"| stage (p50 of {runs} lookups, ms) | " + " | ".join(paths) + " |",
        "|---|" + "---:|" * len(paths),
    ]
    for stage in order:
        cells = [_cell(table[path], stage) for path in paths]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(column: dict[str, float], stage: str) -> str:
    if stage not in column:
        return "-"
    return f"{column[stage]:g}" if stage == SEARCHES else f"{column[stage]:.2f}"
