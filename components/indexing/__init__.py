"""Indexing components: markdown files to chunks, embeddings, Milvus rows and the L0 index."""

import sys
from typing import TYPE_CHECKING

from lazy_imports import LazyImporter

_import_structure = {
    "markdown_reader": ["MarkdownKnowledgeReader"],
    "index_planner": ["IndexPlanner"],
    "markdown_chunker": ["MarkdownChunker"],
    "document_embedder": ["KnowledgeDocumentEmbedder"],
    "milvus_writer": ["MilvusChunkWriter"],
    "l0_index_writer": ["L0IndexWriter"],
    "decision_vector_writer": ["DecisionVectorWriter"],
}

if TYPE_CHECKING:
    from .decision_vector_writer import DecisionVectorWriter as DecisionVectorWriter
    from .document_embedder import KnowledgeDocumentEmbedder as KnowledgeDocumentEmbedder
    from .index_planner import IndexPlanner as IndexPlanner
    from .l0_index_writer import L0IndexWriter as L0IndexWriter
    from .markdown_chunker import MarkdownChunker as MarkdownChunker
    from .markdown_reader import MarkdownKnowledgeReader as MarkdownKnowledgeReader
    from .milvus_writer import MilvusChunkWriter as MilvusChunkWriter
else:
    sys.modules[__name__] = LazyImporter(name=__name__, module_file=__file__, import_structure=_import_structure)
