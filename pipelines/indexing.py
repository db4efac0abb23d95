"""
The indexing pipeline: markdown -> frontmatter -> heading-aware chunks -> embeddings -> Milvus,
plus the L0 index, as one Haystack pipeline built from the Hydra config.

    reader -> planner -> chunker -> embedder -> writer
    reader, embedder -> l0_writer   (a document's summary vector is its first chunk's vector)
    writer -> l0_writer             (the L0 index is written after the vector store)
"""

import logging
import time

from haystack import Pipeline
from omegaconf import DictConfig

from components.contracts import IndexReport
from components.indexing.document_embedder import KnowledgeDocumentEmbedder
from components.indexing.index_planner import IndexPlanner
from components.indexing.l0_index_writer import L0IndexWriter
from components.indexing.markdown_chunker import MarkdownChunker
from components.indexing.markdown_reader import MarkdownKnowledgeReader, check_knowledge_base
from components.indexing.milvus_writer import MilvusChunkWriter
from pipelines.errors import unwrap_pipeline_error

logger = logging.getLogger(__name__)

# Bump when chunk text or embedded text changes shape, so every document is re-embedded once.
CHUNK_FORMAT_VERSION = 4


def index_fingerprint(cfg: DictConfig) -> str:
    """Everything besides file content that changes chunks or vectors."""
    chunking = cfg.chunking
    return (
        f"model={cfg.embedder.model};chunks={chunking.max_tokens}/{chunking.overlap_tokens}/{chunking.min_tokens};"
        f"format={CHUNK_FORMAT_VERSION}"
    )


def build_indexing_pipeline(cfg: DictConfig, progress_bar: bool = False) -> Pipeline:
    milvus = cfg.milvus
    pipeline = Pipeline()
    pipeline.add_component("reader", MarkdownKnowledgeReader(kb_path=cfg.kb.path))
    pipeline.add_component(
        "planner",
        IndexPlanner(
            uri=milvus.uri,
            collection=milvus.collection,
            fingerprint=index_fingerprint(cfg),
            timeout_ms=milvus.get("timeout_ms"),
        ),
    )
    pipeline.add_component(
        "chunker",
        MarkdownChunker(
            max_tokens=cfg.chunking.max_tokens,
            overlap_tokens=cfg.chunking.overlap_tokens,
            min_tokens=cfg.chunking.min_tokens,
            tokenizer_model=cfg.embedder.model,
        ),
    )
    pipeline.add_component(
        "embedder",
        KnowledgeDocumentEmbedder(
            model=cfg.embedder.model,
            device=cfg.embedder.device,
            batch_size=cfg.embedder.batch_size,
            progress_bar=progress_bar,
        ),
    )
    pipeline.add_component(
        "writer",
        MilvusChunkWriter(
            uri=milvus.uri,
            collection=milvus.collection,
            index_type=milvus.index_type,
            index_params=dict(milvus.index_params),
            timeout_ms=milvus.get("timeout_ms"),
        ),
    )
    pipeline.add_component(
        "l0_writer", L0IndexWriter(index_path=cfg.l0.index_path, model=cfg.embedder.model, device=cfg.embedder.device)
    )
    pipeline.connect("reader.documents", "planner.documents")
    pipeline.connect("reader.documents", "l0_writer.documents")
    pipeline.connect("planner.documents", "chunker.documents")
    pipeline.connect("chunker.documents", "embedder.documents")
    pipeline.connect("embedder.documents", "writer.documents")
    pipeline.connect("embedder.documents", "l0_writer.chunks")
    pipeline.connect("planner.plan", "writer.plan")
    # The L0 index is written only once the vector store holds every chunk.
    pipeline.connect("writer.written", "l0_writer.chunks_written")
    return pipeline


def run_indexing(cfg: DictConfig, rebuild: bool = False, progress_bar: bool = False) -> IndexReport:
    """Index the knowledge base of `cfg` incrementally (or from scratch with `rebuild`)."""
    started = time.perf_counter()
    check_knowledge_base(cfg.kb.path)
    pipeline = build_indexing_pipeline(cfg, progress_bar=progress_bar)
    try:
        outputs = pipeline.run(
            {"planner": {"rebuild": rebuild}},
            include_outputs_from={"reader", "planner", "writer"},
        )
    except Exception as exc:
        raise unwrap_pipeline_error(exc) from exc
    plan = outputs["planner"]["plan"]
    writer = outputs["writer"]
    return IndexReport(
        added=plan.added,
        updated=plan.updated,
        unchanged=plan.unchanged,
        removed=plan.removed,
        skipped=outputs["reader"]["skipped"],
        chunks_written=writer["written"],
        chunks_deleted=writer["deleted"],
        collection_count=writer["count"],
        seconds=round(time.perf_counter() - started, 2),
    )
