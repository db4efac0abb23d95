import logging
from typing import Any

import numpy as np
from haystack import component
from haystack.utils import ComponentDevice
from haystack_integrations.components.embedders.sentence_transformers import SentenceTransformersTextEmbedder

from components.common.embedding_models import resolve_model

logger = logging.getLogger(__name__)


@component
class KnowledgeQueryEmbedder:
    """
    Embeds the query variants produced by `QueryTransformer` (usually one, two when entity
    aliases were expanded) into unit-length vectors, with the same model as the chunks.

    A thin wrapper of `SentenceTransformersTextEmbedder` that resolves `packaged:` model names.
    The embeddings leave it as one float32 array (a row per text), not as nested lists: Haystack
    deep-copies every socket value for each receiver, element by element for lists, with a slow
    protocol check per element, which cost about 5 ms per 384-d vector and receiver (three of
    them), more than the vector search itself; an array is copied in microseconds.

    Usage example:

    ```python
    embedder = KnowledgeQueryEmbedder(model="packaged:all-MiniLM-L6-v2")
    embedder.warm_up()
    embedder.run(texts=["disk almost full"])["embeddings"][0][:3]
    ```
    """

    def __init__(self, model: str = "packaged:all-MiniLM-L6-v2", device: str = "cpu") -> None:
        """
        :param model: `packaged:<name>`, a local model folder, or a sentence-transformers model name.
        :param device: Torch device, e.g. "cpu".
        """
        self.model = model
        self.device = device
        self._embedder: SentenceTransformersTextEmbedder | None = None

    def warm_up(self) -> None:
        if self._embedder is None:
            self._embedder = SentenceTransformersTextEmbedder(
                model=resolve_model(self.model),
                device=ComponentDevice.from_str(self.device),
                normalize_embeddings=True,
                progress_bar=False,
            )
            self._embedder.warm_up()
            logger.info("Query embedder ready: %s on %s", self.model, self.device)

    @component.output_types(embeddings=np.ndarray)
    def run(self, texts: list[str]) -> dict[str, Any]:
        """
        :param texts: Query variants.
        :returns: `embeddings`, a float32 array with one row per text, in order (the values the
            model returned, bit for bit).
        """
        self.warm_up()
        vectors = [self._embedder.run(text=text)["embedding"] for text in texts]
        return {"embeddings": np.asarray(vectors, dtype=np.float32)}
