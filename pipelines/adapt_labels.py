"""
Labelled pairs for `knowledge adapt --labels FILE` (a `knowledge eval` JSONL file).

Every label query goes through the one stable split (`pipelines.labels.split.label_split`): `train`
queries become pairs, `check` queries are held out for the verdict and never train. An answerable
train query becomes one pair: the query -> the right document's best chunk (the chunk of a relevant
document the base model scores highest for it), with the wrongly leading document's best chunk as
its hard negative (the best chunk of the highest-scoring other document under the base model).
Off-topic lines carry no positive: they only judge. Design notes: docs/adapt.md#labels.

Usage example:

```python
from pipelines.adapt_labels import label_pairs, split_labels
from pipelines.adapt_pairs import read_kb

labels = split_labels("eval/prometheus-dev.jsonl")
documents, chunks = read_kb("../runbooks")
pairs = label_pairs(labels.train, chunks, encoder)  # encoder: the base SentenceTransformer
```
"""

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document

from components.errors import BadInputError
from pipelines.adapt_pairs import LABEL_KIND, MinedPairs, Pair, assert_trainable_label, check_provenance
from pipelines.evaluation_metrics import EvalQuery
from pipelines.labels.split import label_split, normalised_query


@dataclass(frozen=True)
class LabelSplit:
    """A label file on the two sides of the split: answerable train queries, and every check query."""

    path: str
    train: list[EvalQuery]
    check: list[EvalQuery]

    @property
    def train_queries(self) -> frozenset[str]:
        """The normalised train queries: the only label texts a pair may hold."""
        return frozenset(normalised_query(q.query) for q in self.train)

    def fingerprint(self) -> str:
        """A hash of the train queries and their documents: other labels, other training."""
        rows = sorted(f"{normalised_query(q.query)}\x1f{sorted(q.relevant)}" for q in self.train)
        return hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest()[:16]

    def settings(self, only: bool) -> dict[str, Any]:
        """What of the labels decides the trained weights (a resumed or repeated run must match it)."""
        return {
            "file": str(Path(self.path).resolve()),
            "fingerprint": self.fingerprint(),
            "train": len(self.train),
            "check": len(self.check),
            "only": only,
        }


def split_labels(path: str | Path) -> LabelSplit:
    """
    The labels of `path` by side: the answerable `train` ones (off-topic lines have no positive) and
    all `check` ones.

    :raises BadInputError: The file cannot be read, or the split leaves nothing to train or to judge on.
    """
    from pipelines.evaluation import load_queries

    queries = load_queries(path)
    train = [q for q in queries if label_split(q.query) == "train" and q.answerable]
    check = [q for q in queries if label_split(q.query) == "check"]
    if not train or not any(q.answerable for q in check):
        raise BadInputError(
            f"--labels {path}: {len(train)} answerable train-split and {sum(q.answerable for q in check)} answerable "
            "check-split queries; training and the verdict need at least one of each"
        )
    return LabelSplit(str(path), train, check)


def chunk_text(chunk: Document) -> str:
    """A chunk as the index embeds it: its header (title and section path), then its text."""
    return f"{chunk.meta['embed_header']}\n{(chunk.content or '').strip()}"


def label_pairs(labels: list[EvalQuery], chunks: list[Document], encoder) -> list[Pair]:
    """
    One pair per answerable label: its best relevant chunk and the leading other document's best
    chunk, both by the base model (`encoder`, a SentenceTransformer). Asserts every query is of the
    train split.

    :raises BadInputError: A label names no document of the knowledge base.
    """
    for query in labels:
        assert_trainable_label(query.query, frozenset({normalised_query(query.query)}))
    sources = np.array([chunk.meta["source"] for chunk in chunks])
    _check_documents_exist(labels, set(sources.tolist()))
    texts = [chunk_text(chunk) for chunk in chunks]
    chunk_vectors = encoder.encode(texts, normalize_embeddings=True, show_progress_bar=False)
    query_vectors = encoder.encode([q.query for q in labels], normalize_embeddings=True, show_progress_bar=False)
    pairs = []
    for query, scores in zip(labels, query_vectors @ chunk_vectors.T, strict=True):
        relevant = np.isin(sources, sorted(query.relevant))
        positive = int(np.flatnonzero(relevant)[np.argmax(scores[relevant])])
        others = np.flatnonzero(~relevant)
        if not len(others):
            continue  # a knowledge base of the relevant documents alone has no negative to give
        negative = int(others[np.argmax(scores[others])])
        pairs.append(
            Pair(
                LABEL_KIND,
                query.query,
                texts[positive],
                texts[negative],
                str(sources[positive]),
                str(sources[negative]),
            )
        )
    return pairs


def with_label_pairs(
    cfg, mined: MinedPairs, labels: LabelSplit, chunks: list[Document], documents: list[Document], only: bool
) -> MinedPairs:
    """
    The KB's training pairs (none when `only`) plus one per answerable train-split label, scored by
    the base model (`embedder.model`) and checked like the KB's own.
    """
    from sentence_transformers import SentenceTransformer

    from components.common.embedding_models import resolve_model

    encoder = SentenceTransformer(resolve_model(cfg.embedder.model), device=cfg.embedder.device)
    pairs = label_pairs(labels.train, chunks, encoder)
    check_provenance(pairs, documents, labels.train_queries)
    return replace(mined, pairs=([] if only else mined.pairs) + pairs)


def _check_documents_exist(labels: list[EvalQuery], sources: set[str]) -> None:
    for query in labels:
        if not query.relevant & sources:
            missing = ", ".join(sorted(query.relevant))
            raise BadInputError(
                f"label {query.id} names {missing}, no document of the knowledge base: give the --kb it was labelled on"
            )


def label_pairs_note(pairs: dict[str, int]) -> str:
    """The model card's words on the label pairs, when there are some."""
    if not pairs.get(LABEL_KIND):
        return ""
    return (
        f"; labelled query -> its document's best chunk {pairs[LABEL_KIND]} (the leading other document's as negative)"
    )


def trained_on(settings: dict[str, Any]) -> str:
    """The model card's first sentence: what the model was trained on."""
    base = f"Fine-tuned from `{settings['base_model']}` by `knowledge adapt`"
    labels = settings.get("labels")
    if not labels:
        return (
            f"{base} on the markdown knowledge base below, without labels: training pairs come only from its files "
            "(no evaluation query, label or text)."
        )
    where = "alone (the knowledge base below gave their chunks)" if labels["only"] else "and the knowledge base below"
    return f"{base} on the train split of the labels in `{labels['file']}` {where}; their check split never trained."
