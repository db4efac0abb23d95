"""
The closed sets of values a setting or a component parameter may take, each defined once: the
configuration schema types its keys with these enums (Hydra rejects any other value at load time)
and the components check their init parameters against the same sets.
"""

import math
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum

from components.errors import ParameterError


class Choice(StrEnum):
    """An enum whose member names are its values, so Hydra and the components spell them alike."""

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)


class VectorStoreMode(Choice):
    """sdk: pymilvus MilvusClient.search; haystack: MilvusEmbeddingRetriever; auto: haystack, then sdk."""

    sdk = "sdk"
    haystack = "haystack"
    auto = "auto"


class SidecarPath(Choice):
    """other: the path the main lookup did not use; or one path by name."""

    other = "other"
    sdk = "sdk"
    haystack = "haystack"


class FallbackReason(Choice):
    """
    Why a filtered L1 attempt was retried without the filter. The spec's two: no usable candidate,
    or a best candidate under the reference threshold; and one of this project: the unfiltered dense
    leg's best beats the filtered best by `retrieval.outscored_margin` (the filter likely points at
    the wrong category).
    """

    filtered_vector_no_evidence = "filtered_vector_no_evidence"
    filtered_vector_low_quality = "filtered_vector_low_quality"
    filtered_vector_outscored = "filtered_vector_outscored"


class RetrievalLeg(Choice):
    """The searches of one L1 attempt: dense vectors, and the BM25 full-text leg where the collection has it."""

    dense = "dense"
    bm25 = "bm25"


class DecisionScope(Choice):
    """
    What a decision model (`embedder.decision_model`) decides: `answer`, only answer vs no evidence
    (the ranking model's similarities select the evidence, trigger the fallback and set
    `relevanceLevel`); `all`, every similarity bar (docs/adapt.md#calibration).
    """

    answer = "answer"
    all = "all"


class EmbeddingBackend(Choice):
    """
    What runs the embedding model: sentence-transformers on torch, or the same model exported to
    ONNX and run by ONNX Runtime (no torch in the process), in float32 or int8-quantized weights.
    """

    torch = "torch"
    onnx = "onnx"
    onnx_int8 = "onnx_int8"


class OnOverlong(Choice):
    truncate = "truncate"
    error = "error"


class IndexType(Choice):
    """
    Milvus index types of a collection this project creates: exact (FLAT), inverted file (IVF_FLAT,
    `nlist`; search `nprobe`), graph (HNSW, `M` and `efConstruction`; search `ef`) or the server's
    choice (AUTOINDEX). IVF_PQ, DISKANN and SCANN are left out: Milvus Lite cannot load them again.
    """

    FLAT = "FLAT"
    IVF_FLAT = "IVF_FLAT"
    HNSW = "HNSW"
    AUTOINDEX = "AUTOINDEX"


# The rerank signals and their default weights (each signal lies in [0, 1]): the weights of a
# RuleReranker built without config. conf/rerank/default.yaml repeats them for the CLI, because conf/
# is not part of the installed package; tests/components/common/test_choices.py fails if they differ.
DEFAULT_RERANK_WEIGHTS: dict[str, float] = {
    "similarity": 1.0,
    "document_similarity": 0.5,
    "lexical_overlap": 0.4,
    "title_overlap": 0.2,
    "document_lexical": 0.2,
    "name_match": 0.5,
    "title_match": 0.1,
    "keyword_match": 0.1,
    "entity_match": 0.05,
    "domain_match": 0.03,
    "section_match": 0.02,
    "document_support": 0.05,
    "bm25": 0.1,
}


def check_rerank_weights(weights: Mapping[str, float], name: str = "weights") -> None:
    """
    The rule for rerank weights (`RuleReranker`): known signals only, none below 0. A ParameterError
    naming the weight (`weights.bm25`) and the allowed values.
    """
    if not isinstance(weights, Mapping):
        raise ParameterError(name, repr(weights), "must map rerank signals to weights")
    for signal, weight in sorted(weights.items()):
        if signal not in DEFAULT_RERANK_WEIGHTS:
            raise ParameterError(
                f"{name}.{signal}", str(weight), f"is no rerank signal; known: {', '.join(DEFAULT_RERANK_WEIGHTS)}"
            )
        check_at_least(0, **{f"{name}.{signal}": weight})


# The smallest chunk window in tokens: a smaller one splits sentences into fragments that match nothing.
MIN_CHUNK_TOKENS = 16


def check_chunk_sizes(max_tokens: int, overlap_tokens: int) -> None:
    """The rule for chunk sizes (`MarkdownChunker`): a window of at least 16 tokens, overlapping by less than itself."""
    check_at_least(MIN_CHUNK_TOKENS, max_tokens=max_tokens)
    if not (_is_number(overlap_tokens) and 0 <= overlap_tokens < max_tokens):
        raise ParameterError("overlap_tokens", str(overlap_tokens), f"must lie in [0, max_tokens) = [0, {max_tokens})")


# The server URI schemes pymilvus accepts; a Milvus Lite store is a file path ending in .db.
MILVUS_URI_SCHEMES = ("http", "https", "tcp", "unix")


def check_milvus_uri(uri: str, name: str = "uri") -> None:
    """The rule for a Milvus URI (`KnowledgeStore`)."""
    text = uri if isinstance(uri, str) else ""
    if not (text.endswith(".db") or text.split("://", 1)[0] in MILVUS_URI_SCHEMES and "://" in text):
        raise ParameterError(
            name,
            repr(uri),
            "is neither a Milvus Lite file ending in .db nor a server URI "
            f"({', '.join(s + '://' for s in MILVUS_URI_SCHEMES)})",
        )


# Milvus's rule for a collection name: checked here, or a bad one fails only at the first search.
COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


def check_collection_name(collection: str, name: str = "collection") -> None:
    """The rule for a Milvus collection name (`KnowledgeStore`)."""
    if not (isinstance(collection, str) and COLLECTION_NAME.fullmatch(collection)):
        raise ParameterError(
            name, repr(collection), "must be 1-255 letters, digits or underscores, not starting with a digit"
        )


def check_choice(name: str, value: str, choices: Iterable[str]) -> None:
    """A parameter that takes one of a closed set of values (an enum's `values()`)."""
    allowed = tuple(choices)
    if value not in allowed:
        raise ParameterError(name, repr(value), f"must be one of {', '.join(allowed)}")


def check_named(**values: str | None) -> None:
    """Paths, model names and labels: a ParameterError naming the first that is no non-empty string."""
    for name, value in values.items():
        if not (isinstance(value, str) and value.strip()):
            raise ParameterError(name, repr(value), "must be a non-empty string")


def check_named_or_none(**values: str | None) -> None:
    """Like `check_named`, where None means "none" (no MLflow, no decision model)."""
    check_named(**{name: value for name, value in values.items() if value is not None})


def check_flags(**values: bool) -> None:
    """Switches: a string such as "false" would be true, so only a bool passes."""
    for name, value in values.items():
        if not isinstance(value, bool):
            raise ParameterError(name, repr(value), "must be true or false")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shown(value: object) -> str:
    return str(value) if _is_number(value) else repr(value)


def check_unit_interval(**values: float) -> None:
    """Shares and normalized similarities lie in [0, 1]: a ParameterError naming the first that does not."""
    for name, value in values.items():
        if not (_is_number(value) and 0.0 <= value <= 1.0):  # NaN too
            raise ParameterError(name, _shown(value), "must lie in [0, 1]")


def check_seconds(**values: float) -> None:
    """Durations that bound a wait: a ParameterError naming the first that is not more than 0, or not finite."""
    for name, value in values.items():
        if not (_is_number(value) and value > 0):  # NaN too
            raise ParameterError(name, _shown(value), "must be more than 0 (seconds)")
        if math.isinf(value):  # an endless wait is no deadline: a stalled client would hold its connection
            raise ParameterError(name, _shown(value), "must be a finite number of seconds")


def check_at_least(lowest: float, **values: float) -> None:
    """Counts and sizes have a lower bound: a ParameterError naming the first value under it."""
    for name, value in values.items():
        if not (_is_number(value) and value >= lowest):  # NaN too
            raise ParameterError(name, _shown(value), f"must be at least {lowest}")
