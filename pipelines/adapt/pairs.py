"""
Training pairs for `knowledge adapt`, mined from the knowledge base alone.

The knowledge base is read and chunked by the indexing components (`MarkdownKnowledgeReader`,
`MarkdownChunker`), so the pairs see the same documents, sections and chunk texts as the index.
Three kinds of (anchor, positive) pairs per chunk:

- `title`: the document title -> the chunk text (without its header, which restates the title);
- `heading`: the heading path below the title -> the chunk text (chunks under a sub-heading);
- `sentence`: the chunk's first sentence -> the rest of the chunk, with its header as the index
  embeds it (title and section path first), the nearest thing to a query a KB holds.

`knowledge adapt --labels FILE` adds a fourth kind, `label` (`pipelines.adapt.labels`): a labelled
query of the train split -> its document's best chunk.

Each pair gets a hard negative from a sibling: the document of the same category whose title
shares the most terms (any category when a document has no sibling), its chunk of the same
section kind, formatted as the positive. No query, label or text of `eval/` can enter: the
knowledge base may not be or contain the project's eval folder (`check_training_source`), and
every text of every pair is checked to come from its own KB document (`check_provenance`), but for
the anchor of a `label` pair, which must be a train-split query of the labels given.

Usage example:

```python
from pipelines.adapt.pairs import mine_pairs

mined = mine_pairs("knowledge/")
mined.counts()  # {"title": ..., "heading": ..., "sentence": ...}
mined.pairs[0].anchor, mined.pairs[0].positive, mined.pairs[0].negative
```
"""

import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from haystack import Document

from components.common.text import terms
from components.errors import BadInputError
from components.indexing.markdown_chunker import MarkdownChunker
from components.indexing.markdown_reader import MarkdownKnowledgeReader
from pipelines.labels.split import label_split, normalised_query

# The project's labelled query sets: never training data.
EVAL_DIR = Path(__file__).resolve().parents[2] / "eval"
PAIR_KINDS = ("title", "heading", "sentence")
LABEL_KIND = "label"  # a labelled query -> its document's chunk (pipelines/adapt/labels.py)

# A first sentence that makes a usable anchor: prose of a few words, not a code line or a link list.
_SENTENCE_END = re.compile(r"\n\s*\n|(?<=[.!?])\s+|(?<=[。！？])")
_MIN_ANCHOR_WORDS = 4
_MAX_ANCHOR_CHARS = 300
_MIN_REST_CHARS = 40


class TrainingSourceError(BadInputError):
    """The knowledge base given for training holds (or is) evaluation data."""


@dataclass(frozen=True)
class Pair:
    """One training example: anchor, positive, a sibling's hard negative, and where they came from."""

    kind: str
    anchor: str
    positive: str
    negative: str
    source: str
    negative_source: str


@dataclass
class MinedPairs:
    """The pairs of one knowledge base, its fingerprint and its document count."""

    pairs: list[Pair]
    fingerprint: str
    documents: int
    chunks: int

    def counts(self) -> dict[str, int]:
        counted = Counter(pair.kind for pair in self.pairs)
        labelled = {LABEL_KIND: counted[LABEL_KIND]} if counted[LABEL_KIND] else {}  # runs without labels: as before
        return {**{kind: counted.get(kind, 0) for kind in PAIR_KINDS}, **labelled}


def check_training_source(kb_path: str | Path) -> Path:
    """
    Refuse a knowledge base that is the project's eval folder, lies inside it or contains it:
    evaluation queries and labels must never become training text.

    :raises TrainingSourceError: The path overlaps eval/.
    """
    root = Path(kb_path).resolve()
    if root == EVAL_DIR or EVAL_DIR in root.parents or root in EVAL_DIR.parents:
        raise TrainingSourceError(
            f"refusing to train on {kb_path}: it overlaps the evaluation folder {EVAL_DIR} "
            "(evaluation queries and labels never enter training); give the knowledge base folder itself"
        )
    return root


def kb_fingerprint(documents: list[Document]) -> str:
    """A hash of every document's source path and content hash: the same files give the same value."""
    payload = "\n".join(sorted(f"{d.meta['source']}\x1f{d.meta['doc_hash']}" for d in documents))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def mine_pairs(
    kb_path: str | Path,
    max_tokens: int = 200,
    overlap_tokens: int = 32,
    min_tokens: int = 8,
    tokenizer_model: str = "packaged:all-MiniLM-L6-v2",
) -> MinedPairs:
    """Read, chunk and pair the knowledge base at `kb_path` (chunk sizes as `chunking.*`)."""
    return pairs_from(*read_kb(kb_path, max_tokens, overlap_tokens, min_tokens, tokenizer_model))


def read_kb(
    kb_path: str | Path,
    max_tokens: int = 200,
    overlap_tokens: int = 32,
    min_tokens: int = 8,
    tokenizer_model: str = "packaged:all-MiniLM-L6-v2",
) -> tuple[list[Document], list[Document]]:
    """The knowledge base's documents and chunks, as the index reads and chunks them."""
    check_training_source(kb_path)
    documents = MarkdownKnowledgeReader(kb_path=str(kb_path)).run()["documents"]
    chunker = MarkdownChunker(
        max_tokens=max_tokens, overlap_tokens=overlap_tokens, min_tokens=min_tokens, tokenizer_model=tokenizer_model
    )
    return documents, chunker.run(documents=documents)["documents"]


def pairs_from(documents: list[Document], chunks: list[Document]) -> MinedPairs:
    """The title, heading and sentence pairs of read documents and their chunks."""
    by_source: dict[str, list[Document]] = {}
    for chunk in chunks:
        by_source.setdefault(chunk.meta["source"], []).append(chunk)
    siblings = nearest_siblings(documents)
    pairs: list[Pair] = []
    for document in documents:
        source = document.meta["source"]
        sibling_chunks = by_source.get(siblings.get(source, ""), [])
        for chunk in by_source.get(source, []):
            pairs.extend(_chunk_pairs(chunk, sibling_chunks))
    check_provenance(pairs, documents)
    return MinedPairs(pairs=pairs, fingerprint=kb_fingerprint(documents), documents=len(documents), chunks=len(chunks))


def nearest_siblings(documents: list[Document]) -> dict[str, str]:
    """
    Each document's closest sibling: the document of its category whose title shares the most
    terms (Jaccard), else the closest title in the whole knowledge base; ties go to the first
    source in path order, so the choice is the same on every run.
    """
    title_terms = {d.meta["source"]: set(terms(d.meta.get("title") or "")) for d in documents}
    ordered = sorted(documents, key=lambda d: d.meta["source"])
    nearest: dict[str, str] = {}
    for document in ordered:
        source = document.meta["source"]
        others = [d for d in ordered if d.meta["source"] != source]
        same_category = [d for d in others if d.meta.get("category") == document.meta.get("category")]
        candidates = same_category or others
        if not candidates:
            continue
        best = max(candidates, key=lambda d: _jaccard(title_terms[source], title_terms[d.meta["source"]]))
        nearest[source] = best.meta["source"]
    return nearest


def _jaccard(left: set[str], right: set[str]) -> float:
    union = left | right
    return len(left & right) / len(union) if union else 0.0


def _chunk_pairs(chunk: Document, sibling_chunks: list[Document]) -> list[Pair]:
    if not sibling_chunks:
        return []
    meta = chunk.meta
    content = (chunk.content or "").strip()
    negative_chunk = _matching_chunk(chunk, sibling_chunks)
    negative_content = (negative_chunk.content or "").strip()
    make = _pair_maker(meta["source"], negative_chunk.meta["source"])
    pairs: list[Pair] = []
    title = meta.get("title") or ""
    if title and content:
        pairs.append(make("title", title, content, negative_content))
    if len(meta.get("headings") or []) > 1 and content:
        # The whole path: a sub-heading alone ("Meaning", "Impact") is shared by every runbook.
        pairs.append(make("heading", meta["embed_header"], content, negative_content))
    first, rest = split_first_sentence(content)
    if first and rest:
        positive = f"{meta['embed_header']}\n{rest}"
        negative = f"{negative_chunk.meta['embed_header']}\n{negative_content}"
        pairs.append(make("sentence", first, positive, negative))
    return pairs


def _pair_maker(source: str, negative_source: str):
    def make(kind: str, anchor: str, positive: str, negative: str) -> Pair:
        return Pair(kind, anchor, positive, negative, source, negative_source)

    return make


def _matching_chunk(chunk: Document, sibling_chunks: list[Document]) -> Document:
    """The sibling's chunk of the same section kind (overview, diagnosis ...), else its chunk at the same place."""
    kind = chunk.meta.get("section_kind")
    same_kind = [c for c in sibling_chunks if kind and c.meta.get("section_kind") == kind]
    if same_kind:
        return same_kind[0]
    return sibling_chunks[min(chunk.meta.get("chunk_index", 0), len(sibling_chunks) - 1)]


def split_first_sentence(text: str) -> tuple[str | None, str | None]:
    """The first sentence of a prose text and the rest, or (None, None) when it has no usable one."""
    parts = _SENTENCE_END.split(text.strip(), maxsplit=1)
    if len(parts) != 2:
        return None, None
    first, rest = " ".join(parts[0].split()), parts[1].strip()
    prose = first and not first.startswith(("```", "<", "|", "!", "[", "#"))
    long_enough = len(first.split()) >= _MIN_ANCHOR_WORDS or any(ord(c) > 0x2E80 for c in first)
    if not (prose and long_enough and len(first) <= _MAX_ANCHOR_CHARS and len(rest) >= _MIN_REST_CHARS):
        return None, None
    return first, rest


def check_provenance(pairs: list[Pair], documents: list[Document], label_queries: frozenset[str] = frozenset()) -> None:
    """
    Every text of every pair comes from its knowledge-base document: the anchor, positive and
    negative are cut from the title, headings and body of the documents they name. Anything else
    (an eval query, a label) would fail here, but for the anchor of a `label` pair, which must be
    one of `label_queries` (normalised) and of the train split.

    :raises AssertionError: A pair holds text its document does not, or a query it may not train on.
    """
    texts = {d.meta["source"]: _words(f"{d.meta.get('title') or ''}\n{d.content or ''}") for d in documents}
    for pair in pairs:
        if pair.kind == LABEL_KIND:
            assert_trainable_label(pair.anchor, label_queries)
        else:
            _assert_from(pair.anchor, texts.get(pair.source), pair.source)
        _assert_from(pair.positive, texts.get(pair.source), pair.source)
        _assert_from(pair.negative, texts.get(pair.negative_source), pair.negative_source)


def assert_trainable_label(query: str, label_queries: frozenset[str]) -> None:
    """
    A labelled query may train only from the train split of the labels given: a check-split one is
    what a verdict judges on.

    :raises AssertionError: The query is of the check split, or no query of the labels.
    """
    if label_split(query) != "train":
        raise AssertionError(
            f"a check-split label query may not train (it is held out for the verdict): {query[:80]!r}"
        )
    if normalised_query(query) not in label_queries:
        raise AssertionError(f"label pair anchor is no query of the labels given: {query[:80]!r}")


def _assert_from(text: str, document_text: str | None, source: str) -> None:
    if document_text is None:
        raise AssertionError(f"training text names {source!r}, which is no document of the knowledge base")
    for line in text.split("\n"):
        for piece in line.split(" > "):
            if _words(piece) and _words(piece) not in document_text:
                raise AssertionError(f"training text not found in {source}: {piece[:80]!r}")


def _words(text: str) -> str:
    """Text with its whitespace runs as single spaces (markdown wraps sentences over lines)."""
    return " ".join(text.split())
