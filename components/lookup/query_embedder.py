import logging
from typing import Any

import numpy as np
from haystack import component

from components.common.choices import EmbeddingBackend, check_named, check_named_or_none
from components.common.embedding_models import (
    DEFAULT_BACKEND,
    DEFAULT_MODEL,
    check_backend,
    load_onnx_encoder,
    resolve_model,
)

logger = logging.getLogger(__name__)


@component
class KnowledgeQueryEmbedder:
    """
    Embeds the query and, when `QueryTransformer` expanded entity aliases or names, the expanded
    query into unit-length vectors, with the same model as the chunks.

    With `backend="torch"` a thin wrapper of `SentenceTransformersTextEmbedder` (imported on warm-up
    only: it imports torch); with `backend="onnx"` (or `"onnx_int8"`) the same model exported to
    ONNX and run by ONNX Runtime, with no torch in the process (docs/embedding-backends.md).
    Each embedding leaves it as a float32 array, not as a list of floats: Haystack
    deep-copies every socket value for each receiver, element by element for lists, with a slow
    protocol check per element, which cost about 5 ms per 384-d vector and receiver (three of
    them), more than the vector search itself; an array is copied in microseconds.

    Usage example:

    ```python
    >>> embedder = KnowledgeQueryEmbedder(model="packaged:all-MiniLM-L6-v2")
    >>> embedder.warm_up()
    >>> out = embedder.run(query="disk almost full", expanded_query="disk almost full (DiskAlmostFull)")
    >>> out["query_embedding"].shape, round(float(out["query_embedding"] @ out["query_embedding"]), 3)
    ((384,), 1.0)

    ```
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: str = "cpu",
        backend: str = DEFAULT_BACKEND,
        onnx_cache_dir: str | None = None,
        decision_model: str | None = None,
    ) -> None:
        """
        :param model: `packaged:<name>`, a local model folder, or a sentence-transformers model name
            (the ONNX backends need a local folder or a packaged model).
        :param device: Torch device, e.g. "cpu" (the ONNX backends run on the CPU).
        :param backend: "torch", "onnx" or "onnx_int8".
        :param onnx_cache_dir: Where ONNX exports are cached (default: the user cache folder).
        :param decision_model: A second model whose embeddings decide answer vs no evidence while
            `model` ranks (components/common/decision_scale.py), on the same backend; None: no second
            embedding (the decision outputs are None).
        """
        check_named(model=model, device=device)
        check_backend(backend)
        check_named_or_none(onnx_cache_dir=onnx_cache_dir, decision_model=decision_model)
        self.model = model
        self.device = device
        self.backend = backend
        self.onnx_cache_dir = onnx_cache_dir
        self.decision_model = decision_model
        self._embed = None
        self._decision_embed = None

    def warm_up(self) -> None:
        if self._embed is not None:
            return
        if self.decision_model is not None:
            self._decision_embed = self._embedding_function(self.decision_model)
        self._embed = self._embedding_function(self.model)
        logger.info("Query embedder ready: %s, backend %s on %s", self.model, self.backend, self.device)

    def _embedding_function(self, model: str):
        if self.backend == EmbeddingBackend.torch:
            return self._torch_embed(model)
        return load_onnx_encoder(model, self.backend, self.onnx_cache_dir).encode

    def _torch_embed(self, model: str):
        from haystack.utils import ComponentDevice
        from haystack_integrations.components.embedders.sentence_transformers import SentenceTransformersTextEmbedder

        embedder = SentenceTransformersTextEmbedder(
            model=resolve_model(model),
            device=ComponentDevice.from_str(self.device),
            normalize_embeddings=True,
            progress_bar=False,
        )
        embedder.warm_up()
        return lambda texts: [embedder.run(text=text)["embedding"] for text in texts]

    @component.output_types(
        query_embedding=np.ndarray,
        expanded_query_embedding=np.ndarray,
        decision_query_embedding=np.ndarray,  # None without a decision model
        expanded_decision_query_embedding=np.ndarray,
    )
    def run(self, query: str, expanded_query: str | None = None) -> dict[str, Any]:
        """
        :param query: The normalised query.
        :param expanded_query: The query with its expansions, if any.
        :returns: `query_embedding` and `expanded_query_embedding` (the query's own without an
            expanded query), float32 arrays: the values the model returned, bit for bit; the
            decision model's two (`decision_query_embedding`, `expanded_decision_query_embedding`),
            None without a decision model.
        """
        # One model call for both: half the cost of two on a query that was expanded.
        texts = [query] if expanded_query is None else [query, expanded_query]
        rows = self.embed(texts)
        decision = None if self._decision_embed is None else np.asarray(self._decision_embed(texts), dtype=np.float32)
        return {
            "query_embedding": rows[0],
            "expanded_query_embedding": rows[-1],
            "decision_query_embedding": None if decision is None else decision[0],
            "expanded_decision_query_embedding": None if decision is None else decision[-1],
        }

    def embed(self, texts: list[str]) -> np.ndarray:
        """A float32 array with one row per text, in order (for baselines and benchmarks that batch)."""
        self.warm_up()
        return np.asarray(self._embed(list(texts)), dtype=np.float32)
