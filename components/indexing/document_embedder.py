import logging
from typing import Any

from haystack import Document, component
from haystack.utils import ComponentDevice
from haystack_integrations.components.embedders.sentence_transformers import SentenceTransformersDocumentEmbedder

from components.common.embedding_models import resolve_model

logger = logging.getLogger(__name__)


@component
class KnowledgeDocumentEmbedder:
    """
    Embeds chunks with a sentence-transformers model, the chunk's `embed_header` (title and
    section path) first, into unit-length vectors for the L2 collection.

    A thin wrapper of `SentenceTransformersDocumentEmbedder` whose `model` may name the packaged
    model (`packaged:all-MiniLM-L6-v2`), so the serialized pipeline does not carry a local path.

    Usage example:

    ```python
    embedder = KnowledgeDocumentEmbedder(model="packaged:all-MiniLM-L6-v2")
    embedder.warm_up()
    docs = embedder.run(documents=[Document(content="rm old logs", meta={"embed_header": "Disk full > Fix"})])
    len(docs["documents"][0].embedding)  # 384
    ```
    """

    def __init__(
        self,
        model: str = "packaged:all-MiniLM-L6-v2",
        device: str = "cpu",
        batch_size: int = 32,
        progress_bar: bool = False,
        meta_fields_to_embed: list[str] | None = None,
    ) -> None:
        """
        :param model: `packaged:<name>`, a local model folder, or a sentence-transformers model name.
        :param device: Torch device, e.g. "cpu".
        :param batch_size: Texts per encode batch.
        :param progress_bar: Show a progress bar while embedding.
        :param meta_fields_to_embed: Meta fields embedded before the content (default: embed_header).
        """
        self.model = model
        self.device = device
        self.batch_size = batch_size
        self.progress_bar = progress_bar
        self.meta_fields_to_embed = ["embed_header"] if meta_fields_to_embed is None else list(meta_fields_to_embed)
        self._embedder: SentenceTransformersDocumentEmbedder | None = None

    def warm_up(self) -> None:
        if self._embedder is None:
            self._embedder = SentenceTransformersDocumentEmbedder(
                model=resolve_model(self.model),
                device=ComponentDevice.from_str(self.device),
                batch_size=self.batch_size,
                progress_bar=self.progress_bar,
                normalize_embeddings=True,
                meta_fields_to_embed=self.meta_fields_to_embed,
                embedding_separator="\n",
            )
            self._embedder.warm_up()
            logger.info("Document embedder ready: %s on %s", self.model, self.device)

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        :param documents: Chunks to embed.
        :returns: The same chunks with `embedding` set.
        """
        if not documents:
            return {"documents": []}
        self.warm_up()
        return self._embedder.run(documents=documents)

    def embedding_text(self, document: Document) -> str:
        """
        Exactly the text this embedder encodes for a chunk (used by the indexing benchmark): as
        `SentenceTransformersDocumentEmbedder` builds it, every meta field present and not None,
        an empty one included, then the content, joined by the separator.
        """
        fields = [str(document.meta[key]) for key in self.meta_fields_to_embed if document.meta.get(key) is not None]
        return "\n".join([*fields, document.content or ""])
