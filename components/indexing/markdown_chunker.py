import hashlib
import logging
from typing import Any

from haystack import Document, component

from components.common.choices import check_at_least, check_chunk_sizes, check_named
from components.common.embedding_models import DEFAULT_MODEL, load_tokenizer
from components.common.markdown_sections import Section, section_kind, split_sections
from components.common.text import is_cjk, terms
from components.stores.milvus_collection import MAX_CONTENT_CHARS

logger = logging.getLogger(__name__)

# A window end is moved back to one of these, when one lies in the last part of the window.
_BREAKS = ("\n\n", "\n", ". ", "; ", ", ", " ")
_BREAK_SEARCH_SHARE = 0.4


def evidence_key(source: str, breadcrumb: str, occurrence: int, content: str) -> str:
    """
    The identity of a chunk: the same source path, section, text and occurrence give the same key
    on any machine, and an edit elsewhere in the document leaves the key of this chunk alone.
    """
    payload = "\x1f".join([source, breadcrumb, str(occurrence), content])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


@component
class MarkdownChunker:
    """
    Splits markdown documents into heading-aware chunks with a breadcrumb (`H1 > H2 > H3`).

    A section that fits `max_tokens` (counted with the embedder's tokenizer) is one chunk; a
    longer one is cut into windows of at most `max_tokens` that overlap by about
    `overlap_tokens`, each cut moved back to a paragraph, line, sentence or word boundary.
    Every chunk gets a stable `evidence_key` (also its id) and a content hash.

    Usage example:

    ```python
    >>> from haystack import Document
    >>> chunker = MarkdownChunker(max_tokens=200, overlap_tokens=32)
    >>> doc = Document(content="# Disk\\n## Fix\\nrm old logs", meta={"source": "d.md", "title": "Disk"})
    >>> chunks = chunker.run(documents=[doc])["documents"]
    >>> [(c.meta["breadcrumb"], c.content) for c in chunks]
    [('Disk > Fix', 'rm old logs')]

    ```
    """

    def __init__(
        self,
        max_tokens: int = 200,
        overlap_tokens: int = 32,
        min_tokens: int = 8,
        tokenizer_model: str = DEFAULT_MODEL,
        max_chars: int = MAX_CONTENT_CHARS,
    ) -> None:
        """
        :param max_tokens: Largest chunk, in tokens.
        :param overlap_tokens: Tokens repeated from the end of a window at the start of the next.
        :param min_tokens: A trailing window shorter than this is merged into the previous chunk.
        :param tokenizer_model: Model whose tokenizer counts tokens (the embedding model).
        :param max_chars: Longest chunk in characters (the `content` field's limit): a window of few
            tokens can still be longer, since the tokenizer counts a word of over 100 characters as
            one unknown token; such a window is cut into pieces of at most this many characters.
        """
        check_chunk_sizes(max_tokens, overlap_tokens)
        check_at_least(0, min_tokens=min_tokens)
        check_at_least(1, max_chars=max_chars)
        check_named(tokenizer_model=tokenizer_model)
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens
        self.min_tokens = min_tokens
        self.tokenizer_model = tokenizer_model
        self.max_chars = max_chars
        self._tokenizer = None

    def warm_up(self) -> None:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_model)

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        :param documents: Documents from `MarkdownKnowledgeReader` (meta: source, title, category ...).
        :returns: One `Document` per chunk; content is the chunk text, meta adds breadcrumb,
            headings, section_kind, chunk_index, evidence_key, content_hash, embed_header and terms.
        """
        self.warm_up()
        chunks: list[Document] = []
        for document in documents:
            chunks.extend(self._chunk_document(document))
        return {"documents": chunks}

    def _chunk_document(self, document: Document) -> list[Document]:
        meta = document.meta
        title = meta.get("title") or ""
        chunks: list[Document] = []
        occurrences: dict[tuple[str, str], int] = {}
        for section in split_sections(document.content or ""):
            headings = section.headings or ([title] if title else [])
            breadcrumb = " > ".join(headings)
            for text, tokens in self.split_text_with_counts(section.text):
                occurrence = occurrences.get((breadcrumb, text), 0)
                occurrences[(breadcrumb, text)] = occurrence + 1
                key = evidence_key(meta["source"], breadcrumb, occurrence, text)
                chunk_meta = {
                    **meta,
                    "breadcrumb": breadcrumb,
                    "headings": headings,
                    "section_kind": section_kind(headings),
                    "chunk_index": len(chunks),
                    "evidence_key": key,
                    "content_hash": hashlib.sha256(text.encode("utf-8")).hexdigest()[:16],
                    "embed_header": _embed_header(title, section),
                    "tokens": tokens,
                    "terms": _chunk_terms(title, breadcrumb, meta.get("keywords") or [], text),
                }
                chunks.append(Document(id=key, content=text, meta=chunk_meta))
        return chunks

    def split_text(self, text: str) -> list[str]:
        """Windows of at most `max_tokens`, cut at natural boundaries, overlapping by about `overlap_tokens`."""
        return [window for window, _ in self.split_text_with_counts(text)]

    def split_text_with_counts(self, text: str) -> list[tuple[str, int]]:
        """
        The windows of `split_text`, each with its token count (special tokens excluded), so the
        context packer need not count again at query time.
        """
        text = text.strip()
        if not text:
            return []
        self.warm_up()
        offsets = self._tokenizer.encode(text, add_special_tokens=False).offsets
        windows = [text] if len(offsets) <= self.max_tokens else self._windows(text, offsets)
        if any(len(window) > self.max_chars for window in windows):
            # Words of over 100 characters count as one token each: the token windows can exceed the field.
            logger.warning(
                "Text of %d characters has a window over %d characters: cut by characters", len(text), self.max_chars
            )
            windows = [piece for window in windows for piece in split_by_characters(window, self.max_chars)]
        elif len(windows) == 1:
            return [(text, len(offsets))]
        return [(window, self._count(window)) for window in windows]

    def _count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def _windows(self, text: str, offsets: list[tuple[int, int]]) -> list[str]:
        windows: list[str] = []
        start = 0
        while start < len(offsets):
            end = min(start + self.max_tokens, len(offsets))
            if end < len(offsets):
                end = self._natural_end(text, offsets, start, end)
            if len(offsets) - end < self.min_tokens:
                end = len(offsets) if len(offsets) - start <= self.max_tokens else end
            windows.append(text[offsets[start][0] : offsets[end - 1][1]].strip())
            if end >= len(offsets):
                break
            start = self._overlap_start(text, offsets, start, end)
        return [w for w in windows if w]

    def _natural_end(self, text: str, offsets: list[tuple[int, int]], start: int, end: int) -> int:
        """Move the window end back to the best boundary in its last part, if there is one."""
        window_start = offsets[start][0]
        hard_end = offsets[end - 1][1]
        earliest = offsets[start + int((end - start) * (1 - _BREAK_SEARCH_SHARE))][0]
        for separator in _BREAKS:
            cut = text.rfind(separator, earliest, hard_end)
            if cut > window_start:
                boundary = cut + len(separator.rstrip()) if separator.strip() else cut
                for token in range(end - 1, start, -1):
                    if offsets[token][1] <= boundary:
                        return token + 1
        return end

    def _overlap_start(self, text: str, offsets: list[tuple[int, int]], start: int, end: int) -> int:
        """
        The first token of the next window: `overlap_tokens` back, moved to the start of a word.

        A CJK character is a word of its own, and the move stops `overlap_tokens` further back at
        most, so a long run without word breaks (CJK prose, a long hex string) still advances by
        about `max_tokens - 2 * overlap_tokens` per window instead of one token.
        """
        candidate = max(end - self.overlap_tokens, start + 1)
        floor = max(candidate - self.overlap_tokens, start + 1)
        while candidate > floor and candidate < end and offsets[candidate][0] > 0:
            before = text[offsets[candidate][0] - 1]
            if not before.isalnum() or is_cjk(before) or is_cjk(text[offsets[candidate][0]]):
                break
            candidate -= 1
        return candidate


def _chunk_terms(title: str, breadcrumb: str, keywords: list[str], text: str) -> list[str]:
    """The chunk's comparable terms, computed once here so the reranker does no text analysis per lookup."""
    return sorted(set(terms(" ".join([title, breadcrumb, " ".join(keywords), text]))))


def _embed_header(title: str, section: Section) -> str:
    """
    What is embedded before the chunk text: the document title and the section path below the
    top heading (the top heading usually restates the title, often as a CamelCase identifier).
    """
    below_top = section.headings[1:] if section.headings else []
    return " > ".join([title, *below_top]) if title else " > ".join(section.headings)


def split_by_characters(text: str, max_chars: int) -> list[str]:
    """`text` in pieces of at most `max_chars` characters, each cut at the last whitespace when there is one."""
    pieces = []
    while len(text) > max_chars:
        cut = text.rfind(" ", max_chars // 2, max_chars)
        cut = cut if cut > 0 else max_chars
        pieces.append(text[:cut].strip())
        text = text[cut:].strip()
    if text:
        pieces.append(text)
    return [piece for piece in pieces if piece]
