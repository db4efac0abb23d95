import logging
from collections import Counter
from typing import Any

import numpy as np
from haystack import Document, component

from components.contracts import EntityRef
from components.l0_index import L0Entry, L0Index
from components.markdown_sections import split_sections
from components.text import terms
from components.document_embedder import KnowledgeDocumentEmbedder

logger = logging.getLogger(__name__)


@component
class L0IndexWriter:
    """
    Builds the L0 index from every readable document of the knowledge base (frontmatter and
    headings: titles, keywords, categories, entities and aliases), embeds the titles for the
    reranker's title-similarity signal, and saves it beside the collection.

    Usage example:

    ```python
    writer = L0IndexWriter(index_path=".knowledge/knowledge.l0.json")
    writer.run(documents=reader_output["documents"])  # {"entries": 36, "path": "..."}
    ```
    """

    def __init__(self, index_path: str, model: str = "packaged:all-MiniLM-L6-v2", device: str = "cpu") -> None:
        """
        :param index_path: Where to save the index (JSON; the title vectors go beside it as .npy).
        :param model: Embedding model for the titles: the same as the chunks'.
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
            vectors = self._title_vectors([entry.title for entry in entries])
        L0Index(entries, vectors, self.model, _document_frequencies(documents)).save(self.index_path)
        logger.info("L0 index with %d entries saved to %s", len(entries), self.index_path)
        return {"entries": len(entries), "path": self.index_path}

    def _title_vectors(self, titles: list[str]) -> np.ndarray:
        """One row per title; each distinct title is embedded once (titles such as "Overview" repeat)."""
        distinct = list(dict.fromkeys(titles))
        embedded = self._embedder.run(documents=[Document(content=title) for title in distinct])["documents"]
        row_of = {title: row for row, title in enumerate(distinct)}
        matrix = np.asarray([d.embedding for d in embedded], dtype=np.float32)
        return matrix[[row_of[title] for title in titles]]


def _document_frequencies(documents: list[Document]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for document in documents:
        text = " ".join([document.meta.get("title") or "", " ".join(document.meta.get("keywords") or []), document.content or ""])
        counts.update(set(terms(text)))
    return dict(sorted(counts.items()))


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
    )
