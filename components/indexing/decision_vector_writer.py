import logging
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document, component

from components.common.choices import check_at_least, check_named, check_named_or_none
from components.common.decision_scale import DecisionVectors, DecisionVectorsError
from components.common.embedding_models import DEFAULT_BACKEND, check_backend
from components.contracts import IndexPlan
from components.indexing.document_embedder import KnowledgeDocumentEmbedder

logger = logging.getLogger(__name__)


@component
class DecisionVectorWriter:
    """
    Adds the decision model's vectors of the chunks about to be indexed (components/common/decision_scale.py)
    to the file beside the collection, before the collection writer runs: the file then covers the
    collection before, during and after its change, so a serving process never meets a chunk
    without its vector. Rows of the same id are replaced; the rows of removed chunks stay until
    `DecisionVectorPruner` drops them once the collection writer has run. The chunks pass through
    to the collection writer unchanged. Without a decision model it does nothing (and leaves any file alone).

    The file is `<collection>.decision-vectors.npz` beside the index (`embedder.decision_vectors`);
    the chunks are embedded exactly as the collection's are (embed header first, unit length).

    Usage example:

    ```python
    >>> import tempfile
    >>> from haystack import Document
    >>> from components.contracts import IndexPlan
    >>> path = f"{tempfile.mkdtemp()}/knowledge.decision-vectors.npz"
    >>> writer = DecisionVectorWriter(model="packaged:all-MiniLM-L6-v2", path=path)
    >>> chunk = Document(content="rm old logs", meta={"evidence_key": "disk.md#0", "embed_header": "Disk full"})
    >>> writer.run(documents=[chunk], plan=IndexPlan(rebuild=True))["count"]
    1
    >>> writer.run(documents=[], plan=IndexPlan(stale_ids=["disk.md#0"]))["count"]  # the pruner drops it
    1
    >>> DecisionVectors.load(path, "packaged:all-MiniLM-L6-v2").ids
    ('disk.md#0',)

    ```
    """

    def __init__(
        self,
        model: str | None,
        path: str,
        backend: str = DEFAULT_BACKEND,
        device: str = "cpu",
        batch_size: int = 32,
        onnx_cache_dir: str | None = None,
    ) -> None:
        """
        :param model: The decision model (`embedder.decision_model`); None: nothing to write.
        :param path: The `.npz` file of its vectors.
        :param backend: "torch", "onnx" or "onnx_int8", as the collection's embedder.
        :param device: Torch device.
        :param batch_size: Texts per encode batch.
        :param onnx_cache_dir: Where ONNX exports are cached.
        """
        check_named_or_none(model=model, onnx_cache_dir=onnx_cache_dir)
        check_named(path=path, device=device)
        check_backend(backend)
        check_at_least(1, batch_size=batch_size)
        self.model = model
        self.path = path
        self.backend = backend
        self.device = device
        self.batch_size = batch_size
        self.onnx_cache_dir = onnx_cache_dir
        self._embedder = (
            None
            if model is None
            else KnowledgeDocumentEmbedder(
                model=model, device=device, batch_size=batch_size, backend=backend, onnx_cache_dir=onnx_cache_dir
            )
        )

    def warm_up(self) -> None:
        if self._embedder is not None:
            self._embedder.warm_up()

    @component.output_types(documents=list[Document], count=int)
    def run(self, documents: list[Document], plan: IndexPlan) -> dict[str, Any]:
        """
        :param documents: The chunks to write to the collection (embedded by the ranking model).
        :param plan: Whether the index is rebuilt (the rows of the collection being dropped stay until pruned).
        :returns: `documents`, the same chunks for the collection writer, and `count`, the rows the
            file holds (0 without a decision model).
        """
        if self._embedder is None:
            return {"documents": documents, "count": 0}
        current = self._existing()
        embedded = self._embedder.run(documents=documents)["documents"]
        ids = [document.meta["evidence_key"] for document in embedded]
        vectors = np.array([document.embedding for document in embedded], dtype=np.float32)
        updated = current.updated([], ids, vectors)
        updated.save(self.path)
        logger.info("Decision vectors %s: %d written, %d rows", self.path, len(ids), len(updated.ids))
        return {"documents": documents, "count": len(updated.ids)}

    def _existing(self) -> DecisionVectors:
        """The file as it is; none, a damaged one or another model's starts empty (a lookup then names the rebuild)."""
        if not Path(self.path).is_file():
            return DecisionVectors.empty(self.model)
        try:
            return DecisionVectors.load(self.path, self.model)
        except DecisionVectorsError as exc:
            logger.warning("Starting the decision vectors again: %s", exc)
            return DecisionVectors.empty(self.model)
