import logging
from dataclasses import replace
from typing import Any

from haystack import Document, component

from components.common.choices import EmbeddingBackend, check_at_least, check_flags, check_named, check_named_or_none
from components.common.embedding_models import (
    DEFAULT_BACKEND,
    DEFAULT_MODEL,
    check_backend,
    load_onnx_encoder,
    resolve_model,
)
from components.errors import ParameterError

logger = logging.getLogger(__name__)

# Texts per progress-bar step of the ONNX backend (each step is encoded in length-sorted batches).
_PROGRESS_STEP = 256


@component
class KnowledgeDocumentEmbedder:
    """
    Embeds chunks with a sentence-transformers model, the chunk's `embed_header` (title and
    section path) first, into unit-length vectors for the L2 collection.

    With `backend="torch"` a thin wrapper of `SentenceTransformersDocumentEmbedder` (imported on
    warm-up only); with `backend="onnx"` (or `"onnx_int8"`) the same model exported to ONNX and run
    by ONNX Runtime (docs/embedding-backends.md). `model` may name the packaged model
    (`packaged:all-MiniLM-L6-v2`), so the serialized pipeline does not carry a local path.

    Usage example:

    ```python
    >>> from haystack import Document
    >>> embedder = KnowledgeDocumentEmbedder(model="packaged:all-MiniLM-L6-v2")
    >>> embedder.warm_up()
    >>> docs = embedder.run(documents=[Document(content="rm old logs", meta={"embed_header": "Disk full > Fix"})])
    >>> len(docs["documents"][0].embedding)
    384

    ```
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: str = "cpu",
        batch_size: int = 32,
        progress_bar: bool = False,
        meta_fields_to_embed: list[str] | None = None,
        backend: str = DEFAULT_BACKEND,
        onnx_cache_dir: str | None = None,
    ) -> None:
        """
        :param model: `packaged:<name>`, a local model folder, or a sentence-transformers model name
            (the ONNX backends need a local folder or a packaged model).
        :param device: Torch device, e.g. "cpu" (the ONNX backends run on the CPU).
        :param batch_size: Texts per encode batch.
        :param progress_bar: Show a progress bar while embedding.
        :param meta_fields_to_embed: Meta fields embedded before the content (default: embed_header).
        :param backend: "torch", "onnx" or "onnx_int8".
        :param onnx_cache_dir: Where ONNX exports are cached (default: the user cache folder).
        """
        check_named(model=model, device=device)
        check_at_least(1, batch_size=batch_size)
        check_flags(progress_bar=progress_bar)
        if meta_fields_to_embed is not None and not (
            isinstance(meta_fields_to_embed, list | tuple)
            and all(isinstance(f, str) and f for f in meta_fields_to_embed)
        ):
            raise ParameterError(
                "meta_fields_to_embed", repr(meta_fields_to_embed), "must be a list of meta field names"
            )
        check_backend(backend)
        check_named_or_none(onnx_cache_dir=onnx_cache_dir)
        self.model = model
        self.device = device
        self.batch_size = batch_size
        self.progress_bar = progress_bar
        self.meta_fields_to_embed = ["embed_header"] if meta_fields_to_embed is None else list(meta_fields_to_embed)
        self.backend = backend
        self.onnx_cache_dir = onnx_cache_dir
        self._embedder = None
        self._encoder = None

    def warm_up(self) -> None:
        if self._embedder is not None or self._encoder is not None:
            return
        if self.backend == EmbeddingBackend.torch:
            self._embedder = self._torch_embedder()
        else:
            self._encoder = load_onnx_encoder(self.model, self.backend, self.onnx_cache_dir)
        logger.info("Document embedder ready: %s, backend %s on %s", self.model, self.backend, self.device)

    def _torch_embedder(self):
        from haystack.utils import ComponentDevice
        from haystack_integrations.components.embedders.sentence_transformers import (
            SentenceTransformersDocumentEmbedder,
        )

        embedder = SentenceTransformersDocumentEmbedder(
            model=resolve_model(self.model),
            device=ComponentDevice.from_str(self.device),
            batch_size=self.batch_size,
            progress_bar=self.progress_bar,
            normalize_embeddings=True,
            meta_fields_to_embed=self.meta_fields_to_embed,
            embedding_separator="\n",
        )
        embedder.warm_up()
        return embedder

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        :param documents: Chunks to embed.
        :returns: The same chunks with `embedding` set.
        """
        if not documents:
            return {"documents": []}
        self.warm_up()
        if self._embedder is not None:
            return self._embedder.run(documents=documents)
        texts = [self.embedding_text(document) for document in documents]
        bar = self._progress_bar(len(texts))
        vectors = []
        for start in range(0, len(texts), _PROGRESS_STEP):
            step = texts[start : start + _PROGRESS_STEP]
            vectors.extend(self._encoder.encode(step, self.batch_size).tolist())
            if bar is not None:
                bar.update(len(step))
        if bar is not None:
            bar.close()
        return {"documents": [replace(d, embedding=v) for d, v in zip(documents, vectors, strict=True)]}

    def _progress_bar(self, total: int):
        if not self.progress_bar:
            return None
        from tqdm import tqdm

        return tqdm(total=total, desc="Embedding", unit="text")

    def embedding_text(self, document: Document) -> str:
        """
        Exactly the text this embedder encodes for a chunk (used by the indexing benchmark): as
        `SentenceTransformersDocumentEmbedder` builds it, every meta field present and not None,
        an empty one included, then the content, joined by the separator.
        """
        fields = [str(document.meta[key]) for key in self.meta_fields_to_embed if document.meta.get(key) is not None]
        return "\n".join([*fields, document.content or ""])
