import re
from dataclasses import dataclass, field
from typing import Any

from haystack import component

from components.common.choices import check_at_least, check_named
from components.common.embedding_models import DEFAULT_MODEL, load_tokenizer
from components.common.text import unique
from components.contracts import Competition, ContextPack, EvidenceBlock, PackedBlock

# Below this many tokens of room for content, a block is omitted rather than packed as a stub.
_MIN_CONTENT_TOKENS = 24
_TRUNCATION_MARK = " […]"
# Header words (titles, sources, hit reasons) repeat across lookups; their counts are kept up
# to this many words, then the memo starts again.
_WORD_MEMO_SIZE = 50_000
# Spaces and newlines: whitespace to Python and to a BERT pre-tokenizer alike.
_WORD_BREAKS = re.compile(r"[ \n]+")


@component
class ContextPacker:
    """
    Packs the final evidence blocks into one text within `budget_tokens`, counted with the
    embedding model's tokenizer.

    Each block keeps a header with its source, title, breadcrumb and hit reasons, whole; when the
    budget runs short, block content is truncated (never the header), and blocks that no longer
    fit are omitted. The top-ranked block is never omitted: its content is cut to what fits (and,
    with a budget smaller than its header alone, the header too), so evidence always has a pack.
    Nor is the best block of a competing document (`competition`): the blocks ranked before it
    leave room for its header and some content. The pack records included and omitted sources, the evidence keys of omitted
    blocks (a source can be included through one block and lose another) and whether it truncated.

    Usage example:

    ```python
    >>> from components.contracts import EvidenceBlock
    >>> def block(key, source, words):
    ...     return EvidenceBlock(key, source, "free the disk " * words, "L1", 0.7, "similarity", 0.6, "l2", 0.7, [])
    >>> packer = ContextPacker(budget_tokens=120, tokenizer_model="packaged:all-MiniLM-L6-v2")
    >>> pack = packer.run(evidence_blocks=[block("a#0", "a.md", 20), block("b#0", "b.md", 40)])["context_pack"]
    >>> pack.used_tokens <= 120, pack.included_sources, pack.omitted_sources
    (True, ['a.md'], ['b.md'])

    ```
    """

    def __init__(self, budget_tokens: int = 1200, tokenizer_model: str = DEFAULT_MODEL) -> None:
        """
        :param budget_tokens: Largest context, in tokens.
        :param tokenizer_model: The model whose tokenizer counts tokens (the embedding model).
        """
        check_at_least(1, budget_tokens=budget_tokens)  # a smaller budget than a header still packs a cut block
        check_named(tokenizer_model=tokenizer_model)
        self.budget_tokens = budget_tokens
        self.tokenizer_model = tokenizer_model
        self._tokenizer = None
        self._separator_tokens = 0  # pragma: no mutate
        self._additive = False  # pragma: no mutate
        self._word_tokens: dict[str, int] = {}

    def warm_up(self) -> None:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_model)
            self._separator_tokens = self._count("\n\n")
            self._additive = splits_at_whitespace(self._tokenizer)

    @component.output_types(context_pack=ContextPack)
    def run(self, evidence_blocks: list[EvidenceBlock], competition: Competition | None = None) -> dict[str, Any]:
        """
        :param evidence_blocks: Final evidence blocks in rank order.
        :param competition: A document competing with the best one: its block is always packed.
        :returns: `context_pack`.
        """
        self.warm_up()
        packing = _Packing()
        kept_number, reserve = self._reserved(evidence_blocks, competition)
        for number, block in enumerate(evidence_blocks, start=1):
            held = reserve if number < kept_number else 0
            self._pack_block(packing, number, block, held, kept_number, reserve)
        return {"context_pack": self._context_pack(packing)}

    def _pack_block(
        self, packing: "_Packing", number: int, block: EvidenceBlock, held: int, kept_number: int, reserve: int
    ) -> None:
        """Pack block `number` whole, cut or not at all, leaving `held` tokens for a competing block further down."""
        header = _header(number, block)
        header_tokens = self._count_header(header)
        separator = self._separator_before(packing)
        limit = self.budget_tokens - held
        room = limit - packing.used - header_tokens - separator
        while number > 1 or room >= _MIN_CONTENT_TOKENS:
            omitted, encoding = self._omitted(block, room, competing=number == kept_number)
            if omitted:
                packing.omit(block)
                return
            content, truncated, content_tokens = self._fit(block.content, room, encoding, block.tokens)
            text = header + content
            tokens = self._block_tokens(text, header_tokens, content_tokens)
            used = self._used_with(packing, text, tokens)
            if used <= limit:
                packing.add(block, text, tokens, truncated, used)
                return
            # Joined, the block counts more than its parts (a tokenizer's counts need not add
            # up): its content is cut by the difference, until it fits or the block is omitted.
            room = min(room, content_tokens) - (used - limit)
        # The top-ranked block is always packed, its content cut to what fits.
        limit = self.budget_tokens - self._held_from_top_block(header_tokens, kept_number, reserve)
        text, truncated, tokens = self._fit_top_block(header, block, room, limit)
        packing.add(block, text, tokens, truncated, used=tokens)

    def _omitted(self, block: EvidenceBlock, room: int, competing: bool) -> tuple[bool, Any]:
        """
        Whether the block is omitted for want of room, and its content's encoding when that took one.
        Omitted when room < min(_MIN_CONTENT_TOKENS, content tokens): only possible, and only worth
        counting, when room < _MIN_CONTENT_TOKENS; the competing block is cut to any room there is.
        """
        if room >= _MIN_CONTENT_TOKENS or (competing and room > 0):
            return False, None
        if block.tokens is not None:
            return room < block.tokens, None
        encoding = self._encode(block.content)
        return room < len(encoding.ids), encoding

    def _used_with(self, packing: "_Packing", text: str, tokens: int) -> int:
        """
        Tokens of the pack with `text` (of `tokens`) joined to it. With a tokenizer whose counts add
        up (see `splits_at_whitespace`: its separators count 0) that is the sum; any other counts
        the joined text.
        """
        if self._additive or not packing.parts:
            return packing.used + tokens
        return self._count("\n\n".join([*packing.parts, text]))

    def _held_from_top_block(self, header_tokens: int, kept_number: int, reserve: int) -> int:
        """Room held for a competing block counts only when the top block's header still fits."""
        return reserve if kept_number and self.budget_tokens - reserve > header_tokens else 0

    def _separator_before(self, packing: "_Packing") -> int:
        return self._separator_tokens if packing.parts else 0

    def _block_tokens(self, text: str, header_tokens: int, content_tokens: int) -> int:
        return header_tokens + content_tokens if self._additive else self._count(text)  # see splits_at_whitespace

    def _context_pack(self, packing: "_Packing") -> ContextPack:
        text = "\n\n".join(packing.parts)
        included = unique(b.source for b in packing.packed)
        return ContextPack(
            text=text,
            budget_tokens=self.budget_tokens,
            used_tokens=packing.used,
            included_sources=included,
            omitted_sources=[s for s in unique(packing.omitted) if s not in included],
            truncated=packing.truncated,
            blocks=packing.packed,
            omitted_evidence_keys=packing.omitted_keys,
        )

    def _reserved(self, blocks: list[EvidenceBlock], competition: Competition | None) -> tuple[int, int]:
        """The pack number of the competing document's block (0 when none) and the tokens held for it."""
        key = competition.evidence_key if competition else None
        number = next((n for n, b in enumerate(blocks, start=1) if b.evidence_key == key), 0)
        if number < 2:
            return 0, 0
        return number, self._count_header(
            _header(number, blocks[number - 1])
        ) + self._separator_tokens + _MIN_CONTENT_TOKENS

    def _fit_top_block(self, header: str, block: EvidenceBlock, room: int, limit: int) -> tuple[str, bool, int]:
        """
        The top block within `limit` tokens however small: its header whole and its content cut to
        the room left; only a header longer than the limit is cut itself.
        """
        if room > 0:
            content, truncated, _ = self._fit(block.content, room, None, block.tokens)
            text = header + content
            tokens = self._count(text)
            if tokens <= limit:
                return text, truncated, tokens
        text, truncated, _ = self._fit(header + block.content, limit)
        tokens = self._count(text)
        # Nothing at all where even the cut mark alone is over the limit.
        return (text, truncated, tokens) if tokens <= limit else ("", True, 0)

    def _encode(self, text: str):
        return self._tokenizer.encode(text, add_special_tokens=False)

    def _count(self, text: str) -> int:
        return len(self._encode(text).ids)

    def _count_header(self, header: str) -> int:
        """
        Tokens of a header. With a tokenizer whose counts add up across whitespace (see
        `splits_at_whitespace`) it is the sum of its words' counts, each encoded once per packer.
        """
        if not self._additive:
            return self._count(header)
        memo = self._word_tokens
        total = 0
        for word in _WORD_BREAKS.split(header):
            count = memo.get(word)
            if count is None:
                if len(memo) >= _WORD_MEMO_SIZE:  # pragma: no mutate
                    memo.clear()
                count = memo[word] = self._count(word) if word else 0
            total += count
        return total

    def _fit(self, content: str, room: int, encoding=None, known_tokens: int | None = None) -> tuple[str, bool, int]:
        """
        The content cut to `room` tokens (mark included) at a token boundary, whether it was cut,
        and its token count. A count known from the index (`known_tokens`) spares the encoding of
        content that fits whole.
        """
        if encoding is None and known_tokens is not None and known_tokens <= room:
            return content, False, known_tokens
        encoding = encoding if encoding is not None else self._encode(content)
        if len(encoding.ids) <= room:
            return content, False, len(encoding.ids)
        keep = max(0, room - self._count(_TRUNCATION_MARK) - 1)
        while keep > 0:
            cut = content[: encoding.offsets[keep - 1][1]].rstrip() + _TRUNCATION_MARK
            cut_tokens = self._count(cut)
            if cut_tokens <= room - 1:
                return cut, True, cut_tokens
            keep -= 1
        mark = _TRUNCATION_MARK.strip()
        return mark, True, self._count(mark)


@dataclass
class _Packing:
    """The pack of one run as it grows: texts, packed and omitted blocks, tokens used."""

    parts: list[str] = field(default_factory=list)
    packed: list[PackedBlock] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)
    omitted_keys: list[str] = field(default_factory=list)
    used: int = 0
    truncated: bool = False

    def add(self, block: EvidenceBlock, text: str, tokens: int, truncated: bool, used: int) -> None:
        self.used = used
        self.parts.append(text)
        self.truncated = self.truncated or truncated
        self.packed.append(_packed(block, tokens, truncated))

    def omit(self, block: EvidenceBlock) -> None:
        self.omitted.append(block.source)
        self.omitted_keys.append(block.evidence_key)


def splits_at_whitespace(tokenizer) -> bool:
    """
    Whether token counts add up across whitespace: count(a + "\n" + b) == count(a) + count(b)
    and count("\n\n".join(parts)) == sum of the parts. True for BERT-style tokenizers (the
    packaged all-MiniLM-L6-v2): a character-wise normalizer, a pre-tokenizer that splits at every
    whitespace (so no token spans one), and added tokens without whitespace that do not absorb
    it. The packer then counts each content once instead of three times; for any other
    tokenizer it counts each block and the pack again as joined, and cuts a block the joining
    put over the budget.
    """
    from tokenizers import normalizers, pre_tokenizers

    if not isinstance(tokenizer.pre_tokenizer, pre_tokenizers.BertPreTokenizer):
        return False
    if tokenizer.normalizer is not None and not isinstance(tokenizer.normalizer, normalizers.BertNormalizer):
        return False
    for token in tokenizer.get_added_tokens_decoder().values():
        if token.lstrip or token.rstrip or any(char.isspace() for char in token.content):
            return False
    return True


def _header(number: int, block: EvidenceBlock) -> str:
    """
    The metadata line(s) of a packed block, never truncated, with the line break before the content:
    a tokenizer can count that break, or merge it with the last word.
    """
    title = block.title or block.source
    where = f" › {block.breadcrumb}" if block.breadcrumb and block.breadcrumb != title else ""
    reasons = "; ".join(block.hit_reasons)
    return f"[{number}] {title}{where}\nsource: {block.source} | score {block.score:.3f} | why: {reasons}\n"


def _packed(block: EvidenceBlock, tokens: int, truncated: bool) -> PackedBlock:
    return PackedBlock(
        evidence_key=block.evidence_key,
        source=block.source,
        title=block.title,
        breadcrumb=block.breadcrumb,
        hit_reasons=list(block.hit_reasons),
        tokens=tokens,
        truncated=truncated,
    )
