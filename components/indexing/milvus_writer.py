import logging
import shutil
from collections import Counter
from typing import Any

from haystack import Document, component

from components.contracts import IndexPlan
from components.stores.knowledge_store import KnowledgeStore, check_store
from components.stores.lite_db import collection_folder, damaged_collection, move_plain_file_aside
from components.stores.milvus_collection import (
    CATEGORY_FIELD,
    CONTENT_FIELD,
    ID_FIELD,
    METADATA_FIELD,
    SPARSE_FIELD,
    VECTOR_FIELD,
    CollectionLayout,
    check_dimension,
    create_collection,
    describe_layout,
    ensure_loaded,
    is_local_uri,
    quote_string,
)
from components.stores.milvus_errors import CollectionMismatchError

logger = logging.getLogger(__name__)

_METADATA_KEYS = (
    "source",
    "title",
    "breadcrumb",
    "category",
    "chunk_index",
    "evidence_key",
    "content_hash",
    "doc_hash",
    "index_hash",
    "section_kind",
    "keywords",
    "entities",
    "has_frontmatter",
    "terms",
    "tokens",
    "chunk_count",
)
_BATCH = 500


@component
class MilvusChunkWriter:
    """
    Applies an `IndexPlan` to the Milvus collection: removes the chunks of changed and deleted
    documents, inserts the new chunks, and flushes (unflushed rows search far slower).

    Creates the collection (schema of `components.stores.milvus_collection`, index of the store) on
    first use, and drops and recreates it for a rebuild. Refuses to mix vectors of another dimension
    into a collection. An existing collection without the `category` column gets its chunks without
    it. With the store's `full_text`, a new collection gets the BM25 `sparse` field; an existing one
    without it is never altered: the run says so in `notes` (`knowledge index --rebuild` adds the field).

    Each chunk records how many chunks its document has (`chunk_count`): a run interrupted between
    two insert batches leaves a document with fewer chunks than that, and the next run's planner
    re-indexes it instead of taking it as unchanged.

    Usage example:

    ```python
    >>> import tempfile
    >>> from haystack import Document
    >>> from components.contracts import IndexPlan
    >>> store = KnowledgeStore(uri=f"{tempfile.mkdtemp()}/milvus.db", collection="knowledge")
    >>> def chunk(source, vector):  # as the embedder leaves it (4-d here)
    ...     meta = {"source": source, "evidence_key": f"{source}#0", "category": source.split("/")[0]}
    ...     return Document(content=f"what to do about {source}", embedding=vector, meta=meta)
    >>> chunks = [chunk("disk/full.md", [1.0, 0.0, 0.0, 0.0]), chunk("db/lag.md", [0.0, 1.0, 0.0, 0.0])]
    >>> out = MilvusChunkWriter(store=store).run(documents=chunks, plan=IndexPlan())
    >>> out["written"], out["deleted"], out["count"]
    (2, 0, 2)

    ```
    """

    def __init__(self, store: KnowledgeStore) -> None:
        """
        :param store: The Milvus collection (`KnowledgeStore`), with the index and full-text field
            a new collection gets.
        """
        check_store(store)
        self.store = store
        self.collection = store.collection

    @component.output_types(written=int, deleted=int, count=int, notes=list[str])
    def run(self, documents: list[Document], plan: IndexPlan) -> dict[str, Any]:
        """
        :param documents: Embedded chunks of the added and updated documents.
        :param plan: What to delete, and whether to rebuild.
        :returns: Chunks written, chunks deleted, the collection's row count afterwards, and `notes`:
            what the run could not do as configured and how to get it (the full-text field).
        """
        if plan.rebuild and is_local_uri(self.store.uri):
            move_plain_file_aside(self.store.uri)  # Milvus Lite cannot open it, so it cannot be dropped through Milvus
        client = self.store.connect()
        if plan.rebuild:
            self._drop(client)

        notes: list[str] = []
        deleted = self._delete(client, plan.stale_ids)
        written = self._insert(client, documents, notes)
        if client.has_collection(self.collection):
            client.flush(self.collection)
            notes.extend(self._full_text_notes(client, notes))
        count = self.store.row_count(client)
        logger.info("Collection %s: %d written, %d deleted, %d rows", self.collection, written, deleted, count)
        return {"written": written, "deleted": deleted, "count": count, "notes": notes}

    def _drop(self, client) -> None:
        """
        Drop the collection for a rebuild. A Milvus Lite collection too damaged to load cannot be
        dropped through Milvus: its folder is removed instead (Milvus Lite then no longer has it).
        """
        try:
            exists = client.has_collection(self.collection)
        except Exception as exc:
            folder = collection_folder(self.store.uri, self.collection)
            damaged = damaged_collection(exc)
            if damaged is None or damaged.resolve() != folder.resolve():
                raise
            shutil.rmtree(folder)
            logger.warning("Removed the damaged Milvus Lite collection %s for the rebuild", folder)
            return
        if exists:
            client.drop_collection(self.collection)
            logger.info("Dropped collection %s for a rebuild", self.collection)

    def _full_text_notes(self, client, notes: list[str]) -> list[str]:
        """The hint for a collection that lacks the full-text field asked for (never added silently)."""
        if not self.store.full_text or notes or describe_layout(client, self.collection).has_sparse:
            return []
        note = (
            f"collection {self.collection} has no {SPARSE_FIELD} field (full text, BM25): lookups run dense-only; "
            "run `knowledge index --rebuild` to add it"
        )
        logger.warning(note)
        return [note]

    def _delete(self, client, ids: list[str]) -> int:
        if not ids or not client.has_collection(self.collection):
            return 0
        ensure_loaded(client, self.collection)
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]
            expression = f"{ID_FIELD} in [{', '.join(quote_string(i) for i in batch)}]"
            client.delete(self.collection, filter=expression)
        return len(ids)

    def _insert(self, client, documents: list[Document], notes: list[str]) -> int:
        if not documents:
            return 0
        dim = len(documents[0].embedding)
        if not client.has_collection(self.collection):
            store = self.store
            reason = create_collection(
                client, self.collection, dim, store.index_type, store.index_params, full_text=store.full_text
            )
            notes.extend([reason] if reason else [])
        layout = describe_layout(client, self.collection)
        check_dimension(layout, self.collection, dim)
        counts = Counter(document.meta.get("source") for document in documents)
        rows = [_row(document, layout, counts[document.meta.get("source")]) for document in documents]
        _check_sizes(rows, layout, self.collection)
        for start in range(0, len(rows), _BATCH):
            client.insert(self.collection, rows[start : start + _BATCH])
        return len(rows)


def _check_sizes(rows: list[dict[str, Any]], layout: CollectionLayout, collection: str) -> None:
    """
    Refuse, before anything is inserted, a chunk or category longer than the collection's fields
    (an existing collection may have shorter ones than this schema's): one clear error, not a
    pymilvus failure halfway through the batches.
    """
    for row in rows:
        source = row[METADATA_FIELD].get("source")
        if len(row[CONTENT_FIELD]) > layout.content_max_chars:
            raise CollectionMismatchError(
                f"a chunk of {source} has {len(row[CONTENT_FIELD])} characters; collection {collection}'s "
                f"{CONTENT_FIELD} field takes at most {layout.content_max_chars}: lower chunking.max_tokens"
            )
        if len(row.get(CATEGORY_FIELD, "")) > layout.category_max_chars:
            raise CollectionMismatchError(
                f"the category of {source} is longer than collection {collection}'s {CATEGORY_FIELD} field "
                f"({layout.category_max_chars} characters)"
            )


def _row(document: Document, layout: CollectionLayout, chunk_count: int) -> dict[str, Any]:
    meta = {**document.meta, "chunk_count": chunk_count}
    row = {
        ID_FIELD: meta["evidence_key"],
        CONTENT_FIELD: document.content,
        VECTOR_FIELD: list(map(float, document.embedding)),
        METADATA_FIELD: {key: meta.get(key) for key in _METADATA_KEYS},
    }
    if layout.has_category:
        row[CATEGORY_FIELD] = meta.get("category") or ""
    return row
