import logging
from pathlib import Path
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from components.common.choices import check_named, check_named_or_none
from components.common.decision_scale import DecisionVectors, DecisionVectorsError
from components.contracts import IndexPlan

logger = logging.getLogger(__name__)


@component
class DecisionVectorPruner:
    """
    Drops from the decision vectors file the rows of chunks the collection no longer holds, once
    the collection writer has run (`DecisionVectorWriter` added the new rows before it): the ids
    the plan removed and did not write again, or on a rebuild every id it did not write. Without a
    decision model, or without a file to prune, it does nothing.

    Usage example:

    ```python
    >>> import tempfile
    >>> import numpy as np
    >>> from haystack import Document
    >>> from components.contracts import IndexPlan
    >>> path = f"{tempfile.mkdtemp()}/knowledge.decision-vectors.npz"
    >>> _ = DecisionVectors("packaged:m", ("a#0", "b#0"), np.eye(2, dtype=np.float32)).save(path)
    >>> pruner = DecisionVectorPruner(model="packaged:m", path=path)
    >>> pruner.run(documents=[Document(content="x", meta={"evidence_key": "b#0"})], plan=IndexPlan(stale_ids=["a#0"]))
    {'count': 1}

    ```
    """

    def __init__(self, model: str | None, path: str) -> None:
        """
        :param model: The decision model (`embedder.decision_model`); None: nothing to prune.
        :param path: The `.npz` file of its vectors.
        """
        check_named_or_none(model=model)
        check_named(path=path)
        self.model = model
        self.path = path

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, model=self.model, path=self.path)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DecisionVectorPruner":
        return default_from_dict(cls, data)

    @component.output_types(count=int)
    def run(self, documents: list[Document], plan: IndexPlan, written: int | None = None) -> dict[str, Any]:
        """
        :param documents: The chunks the collection writer wrote (their rows stay).
        :param plan: The ids removed, and whether the index was rebuilt.
        :param written: The collection writer's count: connected so that this runs after it.
        :returns: `count`, the rows the file holds (0 without a decision model or file).
        """
        if self.model is None or not Path(self.path).is_file():
            return {"count": 0}
        try:
            current = DecisionVectors.load(self.path, self.model)
        except DecisionVectorsError as exc:  # the writer found it so too and started again: nothing to keep
            logger.warning("Not pruning the decision vectors: %s", exc)
            return {"count": 0}
        kept = {document.meta["evidence_key"] for document in documents}
        gone = [key for key in current.ids if key not in kept] if plan.rebuild else sorted(set(plan.stale_ids) - kept)
        if not gone:
            return {"count": len(current.ids)}
        pruned = current.updated(gone, [], current.vectors[:0])
        pruned.save(self.path)
        logger.info("Decision vectors %s: %d rows dropped, %d rows", self.path, len(gone), len(pruned.ids))
        return {"count": len(pruned.ids)}
