"""`knowledge bench index`: the indexing pipeline against a bare `SentenceTransformer.encode` of the
same texts (see docs/benchmarks.md)."""

import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipelines.bench.corpus import (
    CorpusFile,
    build_repeated_kb,
    load_bench_config,
    read_corpus,
    resolve_corpus,
    write_copy,
)
from pipelines.bench.machine import OtherCpu, Timing, format_other_cpu, load_average, peak_rss_mb, timed, timed_cpu
from pipelines.config.settings import embedder_params, knowledge_store

INDEX_RATIO_TARGET = 0.85


def _cleanup_milvus(cfg: DictConfig) -> None:
    """Drop the bench collection, unless it lies in a Lite db of the bench's state folder (gone with it)."""
    store = knowledge_store(cfg)
    if not store.is_local or not Path(store.uri).resolve().is_relative_to(Path(cfg.paths.state_dir).resolve()):
        client = store.connect()
        if client.has_collection(store.collection):
            client.drop_collection(store.collection)


def load_pipeline_models(cfg: DictConfig) -> float:
    """Load the pipeline's embedding model (cached per process) and tokenizer; returns seconds."""
    from components.common.embedding_models import load_tokenizer
    from components.indexing.document_embedder import KnowledgeDocumentEmbedder

    embedder = KnowledgeDocumentEmbedder(**embedder_params(cfg), batch_size=cfg.embedder.batch_size)
    _, seconds = timed(lambda: (embedder.warm_up(), load_tokenizer(cfg.embedder.model)))
    return seconds


def load_bare_model(cfg: DictConfig):
    """A plain `SentenceTransformer` of the configured model; returns (model, seconds)."""
    from sentence_transformers import SentenceTransformer

    from components.common.embedding_models import resolve_model

    return timed(lambda: SentenceTransformer(resolve_model(cfg.embedder.model), device=cfg.embedder.device))


def warm_up_indexing(overrides: Sequence[str], files: Sequence[CorpusFile], work: Path) -> float:
    """A small indexing run into the benchmark collection (the timed run rebuilds it); seconds."""
    from pipelines.indexing import run_indexing

    warm_kb = work / "warmup-kb"
    write_copy(files[:8], warm_kb, 0)
    cfg = load_bench_config(overrides, work / "state", warm_kb)
    _, seconds = timed(lambda: run_indexing(cfg, rebuild=True))
    return seconds


def embedding_texts(cfg: DictConfig, chunks: Sequence) -> list[str]:
    """Exactly the texts the pipeline's embedder encodes for `chunks`."""
    from pipelines.indexing import build_indexing_pipeline

    embedder = build_indexing_pipeline(cfg).get_component("embedder")
    return [embedder.embedding_text(chunk) for chunk in chunks]


def encode_bare(model, texts: Sequence[str], cfg: DictConfig):
    return model.encode(
        list(texts),
        batch_size=cfg.embedder.batch_size,
        normalize_embeddings=True,
        show_progress_bar=False,
        device=cfg.embedder.device,
    )


def stored_vector_difference(cfg: DictConfig, chunks: Sequence, vectors, samples: int = 16) -> float:
    """Largest |stored - bare| component over a sample of chunks: ~1e-6 when the texts match."""
    import numpy as np

    from components.stores.milvus_collection import ID_FIELD, VECTOR_FIELD

    step = max(1, len(chunks) // samples)
    picked = list(range(0, len(chunks), step))[:samples]
    ids = [chunks[i].meta["evidence_key"] for i in picked]
    store = knowledge_store(cfg)
    rows = store.connect().get(store.collection, ids=ids, output_fields=[ID_FIELD, VECTOR_FIELD])
    stored = {row[ID_FIELD]: np.asarray(row[VECTOR_FIELD], dtype=np.float32) for row in rows}
    if len(stored) != len(ids):
        raise RuntimeError(f"only {len(stored)} of {len(ids)} sampled chunks were found in the collection")
    return float(max(np.abs(stored[key] - vectors[i]).max() for key, i in zip(ids, picked, strict=True)))


def bench_index(
    overrides: Sequence[str] = (),
    corpus: str | Path | None = None,
    min_chunks: int = 5000,
    rounds: int = 2,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """
    Indexing throughput of the pipeline against bare `SentenceTransformer.encode`; see the module
    docstring. The two sides alternate, bare first and last (`rounds` pipeline runs, one more
    bare run: B P B P B by default), and each side's figure is its mean, so a drift of
    background load during the run weighs on both sides alike. The config is composed from
    `overrides` with the state, knowledge base and collection of the benchmark (`bench_overrides`).
    """
    from pipelines.indexing import run_indexing

    files = read_corpus(resolve_corpus(corpus))
    figures: dict[str, Any] = {"load_avg_start": load_average()}
    with tempfile.TemporaryDirectory(prefix="knowledge-bench-index-") as tmp:
        work = Path(tmp)
        kb_root = work / "kb"
        cfg = load_bench_config(overrides, work / "state", kb_root)
        echo(f"bench index: repeating {len(files)} runbooks to >= {min_chunks} chunks under {work}")
        chunks, copies = build_repeated_kb(cfg, files, min_chunks)
        texts = embedding_texts(cfg, chunks)
        echo(f"{len(chunks)} chunks in {copies} copies; loading models and warming up")

        figures["pipeline_model_load_s"] = round(load_pipeline_models(cfg), 2)
        figures["pipeline_warmup_s"] = round(warm_up_indexing(overrides, files, work), 2)
        model, bare_load_s = load_bare_model(cfg)
        figures["bare_model_load_s"] = round(bare_load_s, 2)
        encode_bare(model, texts[: 2 * cfg.embedder.batch_size], cfg)  # warm-up

        echo(f"timing: bare encode and pipeline alternately, {rounds} pipeline run(s), {rounds + 1} bare")
        bare_runs: list[Timing] = []
        pipeline_runs: list[Timing] = []
        with OtherCpu() as other:
            for _ in range(rounds):
                vectors, timing = timed_cpu(lambda: encode_bare(model, texts, cfg))
                bare_runs.append(timing)
                report, timing = timed_cpu(lambda: run_indexing(cfg, rebuild=True))
                pipeline_runs.append(timing)
                if report.chunks_written != len(chunks):
                    raise RuntimeError(
                        f"the pipeline wrote {report.chunks_written} chunks, the bench chunked {len(chunks)}"
                    )
            vectors, timing = timed_cpu(lambda: encode_bare(model, texts, cfg))
            bare_runs.append(timing)
        figures["other_cpu_share"] = other.share
        figures["vector_max_abs_diff"] = stored_vector_difference(cfg, chunks, vectors)
        _cleanup_milvus(cfg)

    figures.update(index_figures(len(chunks), pipeline_runs, bare_runs))
    figures.update(
        copies=copies,
        documents=len(report.added),
        batch_size=cfg.embedder.batch_size,
        device=cfg.embedder.device,
        peak_rss_mb=peak_rss_mb(),
        load_avg_end=load_average(),
    )
    echo(format_index_figures(figures))
    return figures


def index_figures(chunks: int, pipeline_runs: Sequence[Timing], bare_runs: Sequence[Timing]) -> dict[str, Any]:
    """Throughputs and ratios, each side over the mean of its runs."""
    pipeline_wall = statistics.fmean(t.wall_s for t in pipeline_runs)
    pipeline_cpu = statistics.fmean(t.cpu_s for t in pipeline_runs)
    bare_wall = statistics.fmean(t.wall_s for t in bare_runs)
    bare_cpu = statistics.fmean(t.cpu_s for t in bare_runs)
    ratio = bare_wall / pipeline_wall  # = (chunks / pipeline time) / (chunks / bare time)
    return {
        "chunks": chunks,
        "pipeline_s": [round(t.wall_s, 2) for t in pipeline_runs],
        "pipeline_cpu_s": [round(t.cpu_s, 2) for t in pipeline_runs],
        "pipeline_chunks_per_s": round(chunks / pipeline_wall, 1),
        "bare_encode_s": [round(t.wall_s, 2) for t in bare_runs],
        "bare_cpu_s": [round(t.cpu_s, 2) for t in bare_runs],
        "bare_chunks_per_s": round(chunks / bare_wall, 1),
        "ratio": round(ratio, 3),
        "cpu_ratio": round(bare_cpu / pipeline_cpu, 3),
        "target_ratio": INDEX_RATIO_TARGET,
        "meets_target": ratio >= INDEX_RATIO_TARGET,
    }


def _seconds(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values) + " s"


def format_index_figures(f: dict[str, Any]) -> str:
    verdict = "meets" if f["meets_target"] else "BELOW"
    return "\n".join(
        [
            f"chunks            {f['chunks']} ({f['documents']} documents, {f['copies']} copies of the corpus)",
            f"pipeline          {f['pipeline_chunks_per_s']:.1f} chunks/s  (read, chunk, embed, write Milvus, L0 index; "
            f"wall {_seconds(f['pipeline_s'])}, CPU {_seconds(f['pipeline_cpu_s'])})",
            f"bare encode       {f['bare_chunks_per_s']:.1f} chunks/s  (batch_size {f['batch_size']}, {f['device']}; "
            f"wall {_seconds(f['bare_encode_s'])}, CPU {_seconds(f['bare_cpu_s'])})",
            f"ratio             {f['ratio']:.3f} pipeline/bare, means of the alternating runs ({verdict} target >= "
            f"{f['target_ratio']}); by CPU time {f['cpu_ratio']:.3f}",
            f"model load        pipeline {f['pipeline_model_load_s']:.2f} s, bare {f['bare_model_load_s']:.2f} s "
            f"(excluded; pipeline warm-up run {f['pipeline_warmup_s']:.2f} s)",
            f"vector check      max |stored - bare| = {f['vector_max_abs_diff']:.2e}",
            f"peak RSS          {f['peak_rss_mb']:.0f} MiB",
            f"load average      {f['load_avg_start']} at start, {f['load_avg_end']} at end (1 min, whole machine)",
            f"machine           {format_other_cpu(f['other_cpu_share'])}",
        ]
    )
