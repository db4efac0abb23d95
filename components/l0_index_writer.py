import logging
from collections import Counter
from typing import Any

import numpy as np
from haystack import Document, component

from components.contracts import EntityRef
from components.l0_index import L0Entry, L0Index
from components.markdown_sections import split_sections
from components.text import contains_phrase, fold, terms
from components.document_embedder import KnowledgeDocumentEmbedder

logger = logging.getLogger(__name__)


@component
class L0IndexWriter:
    """
    Builds the L0 index from every readable document of the knowledge base (frontmatter and
    headings: titles, keywords, categories, entities and aliases), embeds a short summary of each
    document (title and opening section) for the reranker's document-similarity signal, and saves
    it beside the collection.

    Usage example:

    ```python
    writer = L0IndexWriter(index_path=".knowledge/knowledge.l0.json")
    writer.run(documents=reader_output["documents"])  # {"entries": 36, "path": "..."}
    ```
    """

    def __init__(self, index_path: str, model: str = "packaged:all-MiniLM-L6-v2", device: str = "cpu") -> None:
        """
        :param index_path: Where to save the index (JSON; the title vectors go beside it as .npy).
        :param model: Embedding model for the summaries: the same as the chunks'.
        :param device: Torch device.
        """
        self.index_path = index_path
        self.model = model
        self.device = device
        self._embedder = KnowledgeDocumentEmbedder(model=model, device=device, meta_fields_to_embed=[])

    def warm_up(self) -> None:
        self._embedder.warm_up()

    @component.output_types(entries=int, path=str)
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        :param documents: All readable documents (not only the changed ones).
        :returns: The number of entries and the saved path.
        """
        entries = [_entry(document) for document in sorted(documents, key=lambda d: d.meta["source"])]
        vectors = None
        if entries:
            by_source = {d.meta["source"]: d for d in documents}
            summaries = [Document(content=summary_text(by_source[e.source])) for e in entries]
            embedded = self._embedder.run(documents=summaries)["documents"]
            vectors = np.asarray([d.embedding for d in embedded], dtype=np.float32)
        index = L0Index(entries, vectors, self.model, _document_frequencies(entries), _domain_precision(documents))
        index.save(self.index_path)
        logger.info("L0 index with %d entries saved to %s", len(entries), self.index_path)
        return {"entries": len(entries), "path": self.index_path}


SUMMARY_CHARS = 800


def summary_text(document: Document) -> str:
    """What stands for a whole document: its title and the start of its first section with text."""
    opening = next((s.text for s in split_sections(document.content or "") if s.text.strip()), "")
    return f"{document.meta['title']}\n{opening[:SUMMARY_CHARS]}"


def _document_terms(document: Document) -> list[str]:
    meta = document.meta
    text = " ".join([meta.get("title") or "", " ".join(meta.get("keywords") or []), document.content or ""])
    return sorted(set(terms(text)))


def _document_frequencies(entries: list[L0Entry]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for entry in entries:
        counts.update(entry.terms)
    return dict(sorted(counts.items()))


def _domain_precision(documents: list[Document]) -> dict[str, float]:
    """Per category: of the documents whose title or text names the category, the share inside it."""
    texts = [fold(f"{d.meta.get('title') or ''} {d.content or ''}") for d in documents]
    precision = {}
    for category in sorted({d.meta["category"] for d in documents if d.meta.get("category")}):
        name = fold(category)
        naming = [d for d, text in zip(documents, texts, strict=True) if contains_phrase(text, name)]
        inside = sum(1 for d in naming if d.meta["category"] == category)
        precision[category] = round(inside / len(naming), 4) if naming else 1.0
    return precision


def _entry(document: Document) -> L0Entry:
    meta = document.meta
    headings = [s.headings[-1] for s in split_sections(document.content or "") if s.headings]
    return L0Entry(
        source=meta["source"],
        title=meta["title"],
        category=meta["category"],
        keywords=list(meta.get("keywords") or []),
        entities=[EntityRef(name=e["name"], aliases=list(e.get("aliases") or [])) for e in meta.get("entities") or []],
        headings=headings,
        terms=_document_terms(document),
    )
