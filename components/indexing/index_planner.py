import hashlib
import logging
from typing import Any

from haystack import Document, component

from components.contracts import IndexPlan
from components.errors import ParameterError
from components.stores.knowledge_store import KnowledgeStore, check_store
from components.stores.milvus_collection import ID_FIELD, METADATA_FIELD

logger = logging.getLogger(__name__)


def fingerprinted_hash(doc_hash: str, fingerprint: str) -> str:
    """The hash stored per chunk: the file content and everything that shapes its chunks and vectors."""
    return hashlib.sha256(f"{doc_hash}\x1f{fingerprint}".encode()).hexdigest()


@component
class IndexPlanner:
    """
    Decides what an indexing run changes by comparing the documents with the collection.

    A document whose content hash (combined with the index fingerprint: embedding model and
    chunking settings) is already stored with all its chunks (as many as each chunk's
    `chunk_count` says) is unchanged and is not re-embedded; an incomplete one (a run interrupted
    between two insert batches) is re-indexed like a changed one; a changed one has
    its old chunks replaced; a source no longer in the knowledge base has its chunks removed.

    Usage example:

    ```python
    >>> import tempfile
    >>> from haystack import Document
    >>> store = KnowledgeStore(uri=f"{tempfile.mkdtemp()}/milvus.db", collection="knowledge")
    >>> planner = IndexPlanner(store=store, fingerprint="minilm/200/32")
    >>> result = planner.run(documents=[Document(content="# Disk full", meta={"source": "disk/full.md", "doc_hash": "1f"})])
    >>> result["plan"].added, result["plan"].unchanged, len(result["documents"])  # an empty store: all to index
    (['disk/full.md'], [], 1)

    ```
    """

    def __init__(self, store: KnowledgeStore, fingerprint: str = "") -> None:
        """
        :param store: The Milvus collection (`KnowledgeStore`).
        :param fingerprint: Everything besides the file content that changes the chunks or vectors.
        """
        check_store(store)
        if not isinstance(fingerprint, str):
            raise ParameterError("fingerprint", repr(fingerprint), "must be a string")
        self.store = store
        self.collection = store.collection
        self.fingerprint = fingerprint

    @component.output_types(documents=list[Document], plan=IndexPlan)
    def run(self, documents: list[Document], rebuild: bool = False) -> dict[str, Any]:
        """
        :param documents: All readable documents of the knowledge base.
        :param rebuild: Start from scratch: every document is re-indexed into a new collection.
        :returns: `documents` to chunk and embed (added or updated), and the `plan`.
        """
        for document in documents:
            document.meta["index_hash"] = fingerprinted_hash(document.meta["doc_hash"], self.fingerprint)
        if rebuild:
            plan = IndexPlan(added=[d.meta["source"] for d in documents], rebuild=True)
            return {"documents": list(documents), "plan": plan}

        stored = self._stored_state()
        plan = IndexPlan()
        to_index = []
        for document in documents:
            source = document.meta["source"]
            previous = stored.pop(source, None)
            if previous is None:
                plan.added.append(source)
                to_index.append(document)
            elif previous["hashes"] == {document.meta["index_hash"]} and _complete(previous):
                plan.unchanged.append(source)
            else:
                plan.updated.append(source)
                plan.stale_ids.extend(previous["ids"])
                to_index.append(document)
        for source, previous in sorted(stored.items()):
            plan.removed.append(source)
            plan.stale_ids.extend(previous["ids"])
        logger.info(
            "Index plan for %s: %d added, %d updated, %d unchanged, %d removed",
            self.collection,
            len(plan.added),
            len(plan.updated),
            len(plan.unchanged),
            len(plan.removed),
        )
        return {"documents": to_index, "plan": plan}

    def _stored_state(self) -> dict[str, dict[str, Any]]:
        """Per source: the ids of its chunks and the hashes they were indexed from."""
        state: dict[str, dict[str, Any]] = {}
        for row in self.store.rows([ID_FIELD, METADATA_FIELD]):
            meta = row[METADATA_FIELD] or {}
            entry = state.setdefault(meta.get("source", ""), {"ids": [], "hashes": set(), "counts": set()})
            entry["ids"].append(row[ID_FIELD])
            entry["hashes"].add(meta.get("index_hash"))
            entry["counts"].add(meta.get("chunk_count"))
        return state


def _complete(previous: dict[str, Any]) -> bool:
    """
    Whether a stored document has all its chunks. Chunks written before `chunk_count` existed
    carry none and are taken as complete.
    """
    counts = previous["counts"] - {None}
    if not counts:
        return True
    return len(counts) == 1 and len(previous["ids"]) == next(iter(counts))
