"""
A sentence encoder on ONNX Runtime, without torch: the model's fast tokenizer, the exported
transformer (components/common/onnx_export.py), then the pooling and normalization its
sentence-transformers config sets, in numpy. Its vectors match `SentenceTransformer.encode` of the
same folder (cosine >= 0.9999, checked by `knowledge bench embedders`).
"""

import json
import logging
from pathlib import Path

import numpy as np

from components.common.onnx_export import (
    ENCODER_FILE,
    INT8_MODEL_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    discard_export,
    ensure_exported,
)

logger = logging.getLogger(__name__)

# Most tokens (texts x padded length) per ONNX Runtime call. Each layer's attention scores are
# texts x heads x length x length floats: kept this small they stay in the CPU cache, and a batch of
# long chunks embeds faster in several calls than in one (docs/embedding-backends.md).
TOKENS_PER_RUN = 512


class OnnxSentenceEncoder:
    """
    Encodes texts into sentence vectors with an exported model folder (see `OnnxSentenceEncoder.load`).

    Usage example:

    ```python
    encoder = OnnxSentenceEncoder.load(resolve_model("packaged:all-MiniLM-L6-v2"))
    encoder.encode(["disk almost full"]).shape  # (1, 384), unit length
    ```
    """

    def __init__(self, folder: Path, quantized: bool = False) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        settings = json.loads((folder / ENCODER_FILE).read_text(encoding="utf-8"))
        self.pooling: str = settings["pooling"]
        self.normalize: bool = settings["normalize"]
        self.do_lower_case: bool = settings["do_lower_case"]
        self.dimension: int = settings["dimension"]
        self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        # As sentence-transformers tokenizes: truncate to the model's max_seq_length, pad to the longest text.
        self.tokenizer.enable_truncation(max_length=settings["max_seq_length"])
        self.tokenizer.enable_padding(pad_id=self.tokenizer.token_to_id("[PAD]") or 0)
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # warnings about unused initializers are noise here
        # Idle intra-op threads sleep instead of spinning: a spinning thread takes a core from the
        # other work of the process (Milvus, tokenizing, other requests) between runs.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(
            str(folder / (INT8_MODEL_FILE if quantized else MODEL_FILE)), options, providers=["CPUExecutionProvider"]
        )
        self.input_names = [i.name for i in self.session.get_inputs()]

    @classmethod
    def load(cls, model_dir: str, cache_dir: str | None = None, quantized: bool = False) -> "OnnxSentenceEncoder":
        """The encoder of a local sentence-transformers model folder, exported first if the cache lacks it."""
        folder = ensure_exported(model_dir, cache_dir, quantized=quantized)
        logger.debug("ONNX encoder of %s from %s (int8: %s)", model_dir, folder, quantized)
        try:
            return cls(folder, quantized=quantized)
        except Exception:  # a damaged cache entry (cut, overwritten): it is only a cache, export it again
            discard_export(folder)
        return cls(ensure_exported(model_dir, cache_dir, quantized=quantized), quantized=quantized)

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """
        Float32 sentence vectors, one row per text, in order. Texts are batched by length (longest
        first, as sentence-transformers does) so a batch pads little.
        """
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(order), batch_size):
            chosen = order[start : start + batch_size]
            vectors[chosen] = self._encode_batch([texts[i] for i in chosen])
        return vectors

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        if self.do_lower_case:
            texts = [text.lower() for text in texts]
        encodings = self.tokenizer.encode_batch(texts)
        arrays = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        lengths = arrays["attention_mask"].sum(axis=1)
        rows = max(1, TOKENS_PER_RUN // max(1, int(lengths.max())))
        pooled = np.concatenate(
            [
                self._run(arrays, start, start + rows, int(lengths[start : start + rows].max()))
                for start in range(0, len(texts), rows)
            ]
        )
        if self.normalize:
            pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled.astype(np.float32)

    def _run(self, arrays: dict[str, np.ndarray], start: int, stop: int, length: int) -> np.ndarray:
        """Pooled vectors of rows start:stop, cut to their own longest text (the padding is on the right)."""
        feed = {name: array[start:stop, :length] for name, array in arrays.items()}
        tokens = self.session.run(None, {name: feed[name] for name in self.input_names})[0]
        return self._pool(tokens, feed["attention_mask"])

    def _pool(self, tokens: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        mask = attention_mask[..., None].astype(tokens.dtype)
        if self.pooling == "cls":
            return tokens[:, 0]
        if self.pooling == "max":
            return np.where(mask > 0, tokens, -1e9).max(axis=1)
        return (tokens * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
