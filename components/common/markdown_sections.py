"""
Splits a markdown body into heading sections with markdown-it-py.

Each section carries its heading path (H1 > H2 > H3) and its raw markdown lines, taken from the
token line maps, so code fences, tables and HTML stay exactly as written.
"""

from dataclasses import dataclass, field
from functools import lru_cache

from markdown_it import MarkdownIt

_PARSER = MarkdownIt("commonmark")

# Heading words that say what kind of section follows; matched on the folded heading text.
SECTION_KINDS: dict[str, tuple[str, ...]] = {
    "overview": ("meaning", "overview", "summary", "symptom", "description", "about", "症状", "概述", "含义"),
    "impact": ("impact", "影响"),
    "diagnosis": ("diagnos", "investigat", "troubleshoot", "check", "debug", "诊断", "排查"),
    "mitigation": (
        "mitigat",
        "remediat",
        "resolution",
        "fix",
        "recover",
        "rollback",
        "workaround",
        "处理",
        "解决",
        "恢复",
    ),
}


@dataclass
class Section:
    headings: list[str] = field(default_factory=list)
    level: int = 0
    text: str = ""

    @property
    def breadcrumb(self) -> str:
        return " > ".join(self.headings)


def section_kind(headings: list[str]) -> str | None:
    """The kind of the nearest heading that names one (overview, impact, diagnosis, mitigation)."""
    for heading in reversed(headings):
        folded = heading.casefold()
        for kind, markers in SECTION_KINDS.items():
            if any(marker in folded for marker in markers):
                return kind
    return None


@lru_cache(maxsize=4096)
def _heading_starts(body: str) -> tuple[tuple[int, int, int, str], ...]:
    """(start line, end line, level, text) of each top-level heading. Memoized: one indexing run
    asks for the sections of each document several times (reader, chunker, L0 index), and the
    markdown parse is most of the cost."""
    tokens = _PARSER.parse(body)
    starts = []
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and token.map is not None and token.level == 0:
            inline = tokens[index + 1]
            starts.append((token.map[0], token.map[1], int(token.tag[1]), inline.content.strip()))
    return tuple(starts)


def split_sections(body: str) -> list[Section]:
    """Sections in document order; text before the first heading forms a section with no heading."""
    lines = body.splitlines()
    heading_starts = _heading_starts(body)

    sections: list[Section] = []
    first_start = heading_starts[0][0] if heading_starts else len(lines)
    preamble = "\n".join(lines[:first_start]).strip()
    if preamble:
        sections.append(Section(headings=[], level=0, text=preamble))

    path: list[tuple[int, str]] = []
    for position, (_start, end, level, text) in enumerate(heading_starts):
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, text))
        next_start = heading_starts[position + 1][0] if position + 1 < len(heading_starts) else len(lines)
        content = "\n".join(lines[end:next_start]).strip()
        sections.append(Section(headings=[t for _, t in path], level=level, text=content))
    return sections


def first_heading(body: str) -> str | None:
    for section in split_sections(body):
        if section.headings:
            return section.headings[0]
    return None


def is_blank_document(body: str) -> bool:
    """True when a body has no text besides headings."""
    return not any(section.text.strip() for section in split_sections(body))
