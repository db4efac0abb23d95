"""
The scale point of `knowledge bench all`: lookup latency at a base size and at a large size
(100,000 chunks by default) of the same collection, in the same process, with the insert time
and the peak RSS.

The sample knowledge base is indexed through the real pipeline (its chunks, L0 index and the
queries below stay real); the collection is then padded with synthetic chunks whose vectors are
random unit vectors drawn with numpy, since embedding 100,000 texts would take far longer than
the point needs on a small CPU machine. The lookups are full `LookupService.lookup` calls.
"""

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from components.common.stats import percentile
from pipelines.bench.machine import OtherCpu, call_ms, latency_summary, peak_rss_mb, settle, timed
from pipelines.config.settings import knowledge_store

SAMPLE_KB = Path(__file__).resolve().parents[2] / "knowledge"
SCALE_RATIO_TARGET = 2.0
SYNTHETIC_CATEGORY = "synthetic"
SCALE_QUERIES = (
    "disk almost full on a worker node",
    "postgres replica lag",
    "certificate expiry",
    "runaway process high cpu",
    "inode exhaustion df -i",
    "how to bake sourdough bread",
    "queue consumers are falling behind",
    "pods evicted for memory pressure",
)
_BATCH = 2000


def synthetic_rows(start: int, count: int, dim: int, seed: int = 7) -> list[dict[str, Any]]:
    """`count` rows in the collection's schema with random unit vectors (reproducible per `start`)."""
    import numpy as np

    from components.stores.milvus_collection import (
        CATEGORY_FIELD,
        CONTENT_FIELD,
        ID_FIELD,
        METADATA_FIELD,
        VECTOR_FIELD,
    )

    vectors = np.random.default_rng(seed + start).standard_normal((count, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = []
    for offset, vector in enumerate(vectors):
        number = start + offset
        key = f"synthetic-{number:07d}"
        rows.append(
            {
                ID_FIELD: key,
                CONTENT_FIELD: f"Synthetic chunk {number} for the scale benchmark.",
                VECTOR_FIELD: vector.tolist(),
                METADATA_FIELD: {
                    "source": f"synthetic/{number // 20:06d}.md",
                    "title": f"Synthetic {number // 20}",
                    "category": SYNTHETIC_CATEGORY,
                    "chunk_index": number % 20,
                    "evidence_key": key,
                },
                CATEGORY_FIELD: SYNTHETIC_CATEGORY,
            }
        )
    return rows


def grow_collection(cfg: DictConfig, target: int) -> dict[str, Any]:
    """Insert synthetic rows until the collection holds `target` rows; flush. Returns counts and seconds."""
    store = knowledge_store(cfg)
    client, layout = store.open_collection()
    name = store.collection
    before = store.row_count(client)
    dim = layout.dim

    def insert() -> None:
        for start in range(before, target, _BATCH):
            client.insert(name, synthetic_rows(start, min(_BATCH, target - start), dim))
        client.flush(name)  # unflushed rows search many times slower

    _, seconds = timed(insert)
    added = max(0, target - before)
    return {
        "chunks": store.row_count(client),
        "added": added,
        "insert_s": round(seconds, 2),
        "insert_chunks_per_s": round(added / seconds, 1) if seconds > 0 and added else None,
    }


def time_service(service, lookups: int, warmups: int = 3) -> dict[str, Any]:
    """Wall p50/p95 of `lookups` lookups over `SCALE_QUERIES`, with the CPU p50 (less blurred by other load)."""
    for query in SCALE_QUERIES[:warmups]:
        service.lookup(query)
    with OtherCpu() as other:
        samples = [call_ms(lambda q=SCALE_QUERIES[i % len(SCALE_QUERIES)]: service.lookup(q)) for i in range(lookups)]
    return {
        **latency_summary([wall for wall, _ in samples]),
        "cpu_p50_ms": round(percentile([cpu for _, cpu in samples], 0.5), 2),
        "other_cpu_share": other.share,
    }


@contextlib.contextmanager
def sample_collection(overrides: Sequence[str] = (), echo: Callable[[str], None] = print) -> Iterator[DictConfig]:
    """
    The sample KB indexed through the pipeline into a throw-away state folder; yields its config,
    composed from `overrides` with the benchmark's state, knowledge base and collection.
    """
    from pipelines.bench.corpus import load_bench_config
    from pipelines.bench.index_bench import _cleanup_milvus
    from pipelines.indexing import run_indexing

    with tempfile.TemporaryDirectory(prefix="knowledge-bench-scale-") as tmp:
        cfg = load_bench_config(overrides, Path(tmp) / "state", SAMPLE_KB)
        report, index_s = timed(lambda: run_indexing(cfg, rebuild=True))
        echo(f"sample KB indexed ({report.collection_count} real chunks, {index_s:.1f} s) into {tmp}")
        try:
            yield cfg
        finally:
            _cleanup_milvus(cfg)


def bench_scale(
    overrides: Sequence[str] = (),
    scale_chunks: int = 100_000,
    base_chunks: int = 10_000,
    lookups: int = 40,
    echo: Callable[[str], None] = print,
    at_end: Callable[[DictConfig], Any] | None = None,
) -> dict[str, Any]:
    """
    Lookup p50 at `base_chunks` and at `scale_chunks` (see the module docstring). `at_end(cfg)`,
    when given, runs on the collection at its large size once both points are measured (its value
    is returned as `at_end`): run earlier, its work on the collection would weigh on the second point.
    """
    from pipelines.lookup import LookupService

    with sample_collection(overrides, echo) as cfg:
        real_chunks = knowledge_store(cfg).row_count()
        service = LookupService(cfg)
        service.warm_up()
        points = []
        for size in (base_chunks, scale_chunks):
            grown = grow_collection(cfg, size)
            settle_s = settle()
            timing = time_service(service, lookups)
            points.append({**grown, "settle_s": round(settle_s, 1), "lookup": timing})
            echo(
                f"  {grown['chunks']} chunks: inserted {grown['added']} synthetic in {grown['insert_s']} s, "
                f"lookup p50 {timing['p50_ms']:.1f} ms p95 {timing['p95_ms']:.1f} ms (CPU p50 {timing['cpu_p50_ms']:.1f} ms)"
            )
        extra = at_end(cfg) if at_end is not None else None
    ratio = points[1]["lookup"]["p50_ms"] / points[0]["lookup"]["p50_ms"]
    return {
        "vectors": "synthetic random unit vectors (numpy), padding the really indexed sample KB",
        "real_chunks": real_chunks,
        "base": points[0],
        "scale": points[1],
        "p50_ratio": round(ratio, 3),
        "cpu_p50_ratio": round(points[1]["lookup"]["cpu_p50_ms"] / points[0]["lookup"]["cpu_p50_ms"], 3),
        "target_p50_ratio": SCALE_RATIO_TARGET,
        "meets_target": ratio <= SCALE_RATIO_TARGET,
        "peak_rss_mb": peak_rss_mb(),
        "at_end": extra,
    }
