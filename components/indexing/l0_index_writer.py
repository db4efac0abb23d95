import logging
from collections import Counter
from typing import Any

import numpy as np
from haystack import Document, component

from components.common.choices import check_named
from components.common.embedding_models import DEFAULT_BACKEND, DEFAULT_MODEL, vector_space
from components.common.l0_words import joined_words
from components.common.markdown_sections import split_sections
from components.common.text import contains_phrase, fold, terms
from components.contracts import EntityRef
from components.indexing.document_embedder import KnowledgeDocumentEmbedder
from components.stores.l0_index import L0Entry, L0Index
from components.stores.l0_index_file import load_l0_index, save_l0_index

logger = logging.getLogger(__name__)


@component
class L0IndexWriter:
    """
    Builds the L0 index from every readable document of the knowledge base (frontmatter and
    headings: titles, keywords, categories, entities and aliases), with one summary vector per
    document for the reranker's document-similarity signal, and saves it beside the collection.

    A document's summary vector is the vector of its first chunk (its title and opening section,
    embedded once already by the indexing pipeline), so summaries cost no extra model work. A
    document not chunked in this run (unchanged) keeps its vector from the previous index when its
    content hash matches; only a document with neither has its summary text embedded here.

    Usage example:

    ```python
    >>> import tempfile
    >>> from haystack import Document
    >>> path = f"{tempfile.mkdtemp()}/kb.l0.json"
    >>> meta = {"source": "disk/full.md", "title": "Disk Full", "category": "disk", "keywords": ["disk space"]}
    >>> writer = L0IndexWriter(index_path=path)
    >>> out = writer.run(documents=[Document(content="# Disk Full\\n\\nFree space.", meta=meta)], chunks=[])
    >>> out["entries"], out["summaries_embedded"]  # no chunk vectors given: the summary was embedded
    (1, 1)

    ```
    """

    def __init__(
        self,
        index_path: str,
        model: str = DEFAULT_MODEL,
        device: str = "cpu",
        backend: str = DEFAULT_BACKEND,
        onnx_cache_dir: str | None = None,
    ) -> None:
        """
        :param index_path: Where to save the index (JSON; the title vectors go beside it as .npy).
        :param model: Embedding model for the summaries: the same as the chunks'.
        :param device: Torch device.
        :param backend: The chunks' embedding backend: "torch", "onnx" or "onnx_int8".
        :param onnx_cache_dir: Where ONNX exports are cached (default: the user cache folder).
        """
        check_named(index_path=index_path)  # the model, device and backend: checked by its embedder below
        self.index_path = index_path
        self.model = model
        self.device = device
        self.backend = backend
        self.onnx_cache_dir = onnx_cache_dir
        self._embedder = KnowledgeDocumentEmbedder(
            model=model, device=device, meta_fields_to_embed=[], backend=backend, onnx_cache_dir=onnx_cache_dir
        )

    def warm_up(self) -> None:
        self._embedder.warm_up()

    @component.output_types(entries=int, path=str, summaries_embedded=int)
    def run(
        self, documents: list[Document], chunks: list[Document] | None = None, chunks_written: int | None = None
    ) -> dict[str, Any]:
        """
        :param documents: All readable documents (not only the changed ones).
        :param chunks: The chunks embedded in this run (with `embedding`), if any.
        :param chunks_written: What the vector-store writer wrote; connected, it makes this writer run
            after the vector store is complete, so a failed run leaves the previous L0 index.
        :returns: The number of entries, the saved path and how many summaries had to be embedded
            here (neither a fresh first chunk nor a previous vector).
        """
        entries = _entries(documents)
        vectors, embedded = None, 0
        if entries:
            vectors, embedded = self._summary_vectors(entries, documents, chunks or [])
        index = _index(documents, entries, vectors, vector_space(self.model, self.backend))
        save_l0_index(index, self.index_path)
        logger.info(
            "L0 index with %d entries saved to %s (%d summaries embedded)", len(entries), self.index_path, embedded
        )
        return {"entries": len(entries), "path": self.index_path, "summaries_embedded": embedded}

    def _summary_vectors(
        self, entries: list[L0Entry], documents: list[Document], chunks: list[Document]
    ) -> tuple[np.ndarray, int]:
        vectors: dict[str, Any] = {
            c.meta["source"]: c.embedding for c in chunks if c.meta.get("chunk_index") == 0 and c.embedding is not None
        }
        previous = self._previous_vectors(entries, vectors)
        for entry in entries:
            kept = previous.get((entry.source, entry.doc_hash))
            if entry.source not in vectors and kept is not None:
                vectors[entry.source] = kept
        missing = [e.source for e in entries if e.source not in vectors]
        if missing:
            by_source = {d.meta["source"]: d for d in documents}
            summaries = [Document(content=summary_text(by_source[source])) for source in missing]
            for source, document in zip(missing, self._embedder.run(documents=summaries)["documents"], strict=True):
                vectors[source] = document.embedding
        return np.asarray([vectors[e.source] for e in entries], dtype=np.float32), len(missing)

    def _previous_vectors(self, entries: list[L0Entry], fresh: dict[str, Any]) -> dict[tuple[str, str], np.ndarray]:
        """(source, doc_hash) -> summary vector of the index saved before, when it is usable."""
        try:
            previous = load_l0_index(self.index_path)
        except Exception:  # none yet, or unreadable: every summary comes from this run
            return {}
        if previous.model != vector_space(self.model, self.backend) or previous.summary_vectors is None:
            return {}
        if previous.summary_vectors.shape[1] != self._dimension(entries, fresh):  # another model's file
            return {}
        return {
            (entry.source, entry.doc_hash): vector
            for entry, vector in zip(previous.entries, previous.summary_vectors, strict=True)
            if entry.doc_hash
        }

    def _dimension(self, entries: list[L0Entry], fresh: dict[str, Any]) -> int:
        """The model's vector dimension: a fresh vector's, else one short text embedded to learn it."""
        if fresh:
            return len(next(iter(fresh.values())))
        [probe] = self._embedder.run(documents=[Document(content=entries[0].title or "dimension")])["documents"]
        return len(probe.embedding)


def l0_index_of(documents: list[Document]) -> L0Index:
    """
    The L0 index of the knowledge base's documents as read, without summary vectors: all that
    matching a query against it reads (`components.lookup.l0_matching`), built without a model.
    """
    return _index(documents, _entries(documents), None, "")


def _entries(documents: list[Document]) -> list[L0Entry]:
    return [_entry(document) for document in sorted(documents, key=lambda d: d.meta["source"])]


def _index(documents: list[Document], entries: list[L0Entry], vectors: np.ndarray | None, model: str) -> L0Index:
    return L0Index(
        entries,
        vectors,
        model,
        _document_frequencies(entries),
        _domain_precision(documents),
        _joined_words(documents),
    )


SUMMARY_CHARS = 800


def summary_text(document: Document) -> str:
    """What stands for a whole document: its title and the start of its first section with text."""
    opening = next((s.text for s in split_sections(document.content or "") if s.text.strip()), "")
    return f"{document.meta['title']}\n{opening[:SUMMARY_CHARS]}"


def _document_text(document: Document) -> str:
    meta = document.meta
    return " ".join([meta.get("title") or "", " ".join(meta.get("keywords") or []), document.content or ""])


def _document_terms(document: Document) -> list[str]:
    return sorted(set(terms(_document_text(document))))


def _document_frequencies(entries: list[L0Entry]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for entry in entries:
        counts.update(entry.terms)
    return dict(sorted(counts.items()))


def _joined_words(documents: list[Document]) -> set[str]:
    return set().union(*(joined_words(_document_text(document)) for document in documents))


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
        doc_hash=meta.get("doc_hash") or "",
    )
