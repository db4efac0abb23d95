import logging
from typing import Any

from haystack import component

from components.contracts import ContextPack, EvidenceBlock, PackedBlock
from components.models import load_tokenizer
from components.text import unique

logger = logging.getLogger(__name__)

# Below this many tokens of room for content, a block is omitted rather than packed as a stub.
_MIN_CONTENT_TOKENS = 24
_TRUNCATION_MARK = " […]"


@component
class ContextPacker:
    """
    Packs the final evidence blocks into one text within `budget_tokens`, counted with the
    embedding model's tokenizer.

    Each block keeps a header with its source, title, breadcrumb and hit reasons, whole; when the
    budget runs short, block content is truncated (never the header), and blocks that no longer
    fit are omitted. The pack records included and omitted sources, the evidence keys of omitted
    blocks (a source can be included through one block and lose another) and whether it truncated.

    Usage example:

    ```python
    packer = ContextPacker(budget_tokens=800)
    pack = packer.run(evidence_blocks=blocks)["context_pack"]
    pack.used_tokens <= 800, pack.omitted_sources
    ```
    """

    def __init__(self, budget_tokens: int = 1200, tokenizer_model: str = "packaged:all-MiniLM-L6-v2") -> None:
        """
        :param budget_tokens: Largest context, in tokens.
        :param tokenizer_model: The model whose tokenizer counts tokens (the embedding model).
        """
        self.budget_tokens = budget_tokens
        self.tokenizer_model = tokenizer_model
        self._tokenizer = None

    def warm_up(self) -> None:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_model)

    @component.output_types(context_pack=ContextPack)
    def run(self, evidence_blocks: list[EvidenceBlock]) -> dict[str, Any]:
        """
        :param evidence_blocks: Final evidence blocks in rank order.
        :returns: `context_pack`.
        """
        self.warm_up()
        parts: list[str] = []
        packed: list[PackedBlock] = []
        omitted: list[str] = []
        omitted_keys: list[str] = []
        used = 0
        truncated_any = False
        separator_tokens = self._count("\n\n")
        for number, block in enumerate(evidence_blocks, start=1):
            header = _header(number, block)
            header_tokens = self._count(header)
            room = self.budget_tokens - used - header_tokens - (separator_tokens if parts else 0)
            if room < min(_MIN_CONTENT_TOKENS, self._count(block.content)):
                omitted.append(block.source)
                omitted_keys.append(block.evidence_key)
                continue
            content, truncated = self._fit(block.content, room)
            text = f"{header}\n{content}"
            tokens = self._count(text)
            used += tokens + (separator_tokens if parts else 0)
            parts.append(text)
            truncated_any = truncated_any or truncated
            packed.append(
                PackedBlock(
                    evidence_key=block.evidence_key,
                    source=block.source,
                    title=block.title,
                    breadcrumb=block.breadcrumb,
                    hit_reasons=list(block.hit_reasons),
                    tokens=tokens,
                    truncated=truncated,
                )
            )
        text = "\n\n".join(parts)
        included = unique(b.source for b in packed)
        pack = ContextPack(
            text=text,
            budget_tokens=self.budget_tokens,
            used_tokens=self._count(text) if text else 0,
            included_sources=included,
            omitted_sources=[s for s in unique(omitted) if s not in included],
            truncated=truncated_any,
            blocks=packed,
            omitted_evidence_keys=omitted_keys,
        )
        return {"context_pack": pack}

    def _count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def _fit(self, content: str, room: int) -> tuple[str, bool]:
        """The content cut to `room` tokens (mark included) at a token boundary."""
        encoding = self._tokenizer.encode(content, add_special_tokens=False)
        if len(encoding.ids) <= room:
            return content, False
        keep = max(0, room - self._count(_TRUNCATION_MARK) - 1)
        while keep > 0:
            cut = content[: encoding.offsets[keep - 1][1]].rstrip() + _TRUNCATION_MARK
            if self._count(cut) <= room - 1:
                return cut, True
            keep -= 1
        return _TRUNCATION_MARK.strip(), True


def _header(number: int, block: EvidenceBlock) -> str:
    """The metadata line(s) of a packed block: never truncated."""
    title = block.title or block.source
    where = f" › {block.breadcrumb}" if block.breadcrumb and block.breadcrumb != title else ""
    reasons = "; ".join(block.hit_reasons)
    return f"[{number}] {title}{where}\nsource: {block.source} | score {block.score:.3f} | why: {reasons}"
