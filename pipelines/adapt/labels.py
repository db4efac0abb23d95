"""
Labelled pairs for `knowledge adapt --labels FILE` (a `knowledge eval` JSONL file) or
`knowledge adapt --labels-from-store` (the trace store's labels, merged as `knowledge labels export` merges them).

Every label query goes through the one stable split (`pipelines.labels.split.label_split`): `train`
queries become pairs, `check` queries are held out for the verdict and never train. An answerable
train query becomes one pair: the query -> the right document's best chunk (the chunk of a relevant
document the base model scores highest for it), with the wrongly leading document's best chunk as
its hard negative (the best chunk of the highest-scoring other document under the base model).
Off-topic lines carry no positive: they only judge. Design notes: docs/adapt.md#labels.

Usage example:

```python
from pipelines.adapt.labels import label_pairs, split_labels
from pipelines.adapt.pairs import read_kb

labels = split_labels("eval/prometheus-dev.jsonl")  # or store_labels(cfg, print): the trace store's
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
from pipelines.adapt.pairs import LABEL_KIND, MinedPairs, Pair, assert_trainable_label, check_provenance
from pipelines.evaluation.metrics import EvalQuery
from pipelines.labels.split import label_split, normalised_query


@dataclass(frozen=True)
class LabelSplit:
    """Labels on the two sides of the split: answerable train queries, and every check query."""

    path: str  # the label file, or with `from_store` the trace store's URL (a password hidden)
    train: list[EvalQuery]
    check: list[EvalQuery]
    from_store: bool = False

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
        source = {"store": self.path} if self.from_store else {"file": str(Path(self.path).resolve())}
        return {
            **source,
            "fingerprint": self.fingerprint(),
            "train": len(self.train),
            "check": len(self.check),
            "only": only,
        }


def chosen_labels(cfg, path: str | None, from_store: bool, only: bool, say=print) -> LabelSplit | None:
    """
    The labels `knowledge adapt` was given: a file (`--labels FILE`), the trace store's
    (`--labels-from-store`) or none.

    :raises BadInputError: Both sources, or `only` (`--labels-only`) with neither.
    """
    if path and from_store:
        raise BadInputError("--labels FILE and --labels-from-store: give one source of labels")
    if only and not (path or from_store):
        raise BadInputError(
            "--labels-only needs --labels FILE or --labels-from-store: the labelled pairs are what it trains on"
        )
    if from_store:
        return store_labels(cfg, say)
    return split_labels(path) if path else None


def split_labels(path: str | Path) -> LabelSplit:
    """
    The labels of `path` by side: the answerable `train` ones (off-topic lines have no positive) and
    all `check` ones.

    :raises BadInputError: The file cannot be read, or the split leaves nothing to train or to judge on.
    """
    from pipelines.evaluation.run import load_queries

    queries = load_queries(path)
    train = [q for q in queries if label_split(q.query) == "train" and q.answerable]
    check = [q for q in queries if label_split(q.query) == "check"]
    return _enough(LabelSplit(str(path), train, check), f"--labels {path}")


def store_labels(cfg, say=print) -> LabelSplit:
    """
    The labels of the trace store (`trace.db_url`) by side: the rows `knowledge labels export` would
    write (the latest label of each lookup, agreeing labels of a query merged, contradicting ones
    left out), split by the same stable hash.

    :raises BadInputError: No trace database, or the split leaves nothing to train or to judge on.
    """
    from components.common.masking import masked
    from pipelines.labels.export import build_export
    from pipelines.state.traces import open_store

    store = open_store(cfg, reading=True)
    try:
        export = build_export(store.labels())
    finally:
        store.dispose()
    queries = {split: [_eval_query(row) for row in rows] for split, rows in export.rows.items()}
    url = masked(str(cfg.trace.db_url))
    say(
        f"labels of the trace store {url}: {len(queries['train'])} train-split and {len(queries['check'])} "
        f"check-split queries ({len(export.contradictions)} contradicted queries left out; "
        "`knowledge labels export` lists them)"
    )
    train = [q for q in queries["train"] if q.answerable]
    return _enough(LabelSplit(url, train, queries["check"], from_store=True), f"--labels-from-store ({url})")


def _eval_query(row: dict[str, Any]) -> EvalQuery:
    return EvalQuery(query=row["query"], relevant=set(row["relevant"]), kind=row["kind"], id=row["id"])


def _enough(labels: LabelSplit, given: str) -> LabelSplit:
    answerable_check = sum(q.answerable for q in labels.check)
    if not labels.train or not answerable_check:
        raise BadInputError(
            f"{given}: {len(labels.train)} answerable train-split and {answerable_check} answerable "
            "check-split queries; training and the verdict need at least one of each"
        )
    return labels


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
    source = f"in `{labels['file']}`" if "file" in labels else f"of the trace store `{labels['store']}`"
    return f"{base} on the train split of the labels {source} {where}; their check split never trained."
