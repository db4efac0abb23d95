"""Lookup components of `lookup_knowledge`, in the spec's order (see docs/architecture.md)."""

import sys
from typing import TYPE_CHECKING

from lazy_imports import LazyImporter

_import_structure = {
    "query_transformer": ["QueryTransformer"],
    "l0_hint_extractor": ["L0HintExtractor"],
    "query_embedder": ["KnowledgeQueryEmbedder"],
    "fallback_retriever": ["FallbackRetriever"],
    "sidecar_comparator": ["SidecarComparator"],
    "rule_reranker": ["RuleReranker"],
    "competition_detector": ["CompetitionDetector"],
    "evidence_deduper": ["EvidenceDeduper"],
    "context_packer": ["ContextPacker"],
    "result_assembler": ["ResultAssembler"],
}

if TYPE_CHECKING:
    from .competition_detector import CompetitionDetector as CompetitionDetector
    from .context_packer import ContextPacker as ContextPacker
    from .evidence_deduper import EvidenceDeduper as EvidenceDeduper
    from .fallback_retriever import FallbackRetriever as FallbackRetriever
    from .l0_hint_extractor import L0HintExtractor as L0HintExtractor
    from .query_embedder import KnowledgeQueryEmbedder as KnowledgeQueryEmbedder
    from .query_transformer import QueryTransformer as QueryTransformer
    from .result_assembler import ResultAssembler as ResultAssembler
    from .rule_reranker import RuleReranker as RuleReranker
    from .sidecar_comparator import SidecarComparator as SidecarComparator
else:
    sys.modules[__name__] = LazyImporter(name=__name__, module_file=__file__, import_structure=_import_structure)
