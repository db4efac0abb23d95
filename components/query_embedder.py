import logging
from typing import Any

from haystack import component
from haystack.utils import ComponentDevice
from haystack_integrations.components.embedders.sentence_transformers import SentenceTransformersTextEmbedder

from components.models import resolve_model

logger = logging.getLogger(__name__)


@component
class KnowledgeQueryEmbedder:
    """
    Embeds the query variants produced by `QueryTransformer` (usually one, two when entity
    aliases were expanded) into unit-length vectors, with the same model as the chunks.

    A thin wrapper of `SentenceTransformersTextEmbedder` that resolves `packaged:` model names.

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

    @component.output_types(embeddings=list[list[float]])
    def run(self, texts: list[str]) -> dict[str, Any]:
        """
        :param texts: Query variants.
        :returns: One embedding per text, in order.
        """
        self.warm_up()
        return {"embeddings": [self._embedder.run(text=text)["embedding"] for text in texts]}
