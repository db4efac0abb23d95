"""MarkdownChunker: heading breadcrumbs, the token limit, window overlap and stable evidence keys."""

import hashlib

import pytest
from haystack import Document

from components.common.embedding_models import count_tokens
from components.common.text import is_cjk
from components.indexing.markdown_chunker import MarkdownChunker, split_by_characters
from components.indexing.markdown_reader import MarkdownKnowledgeReader
from tests.components.refusals import assert_refused
from tests.conftest import SAMPLE_KB
from tests.helpers import MODEL

WORDS = [
    "disk",
    "filesystem",
    "partition",
    "volume",
    "inode",
    "journal",
    "mount",
    "kernel",
    "process",
    "socket",
    "latency",
    "throughput",
    "replica",
    "primary",
    "standby",
    "checkpoint",
    "vacuum",
    "buffer",
    "cache",
    "eviction",
    "pressure",
    "threshold",
    "alert",
    "page",
]


def long_paragraphs(paragraphs: int = 6, sentences: int = 7, seed: int = 1) -> str:
    """Deterministic English-like prose, long enough to need several windows."""
    out = []
    for p in range(paragraphs):
        sentence_list = []
        for s in range(sentences):
            n = 9 + (p * 7 + s * 3 + seed) % 8
            words = [WORDS[(p * 31 + s * 17 + i * 5 + seed) % len(WORDS)] for i in range(n)]
            sentence_list.append(" ".join(words).capitalize() + ".")
        out.append(" ".join(sentence_list))
    return "\n\n".join(out)


def tokens(text: str) -> int:
    return count_tokens(MODEL, text)


def chunk(chunker: MarkdownChunker, body: str, source: str = "ops/doc.md", title: str = "Doc") -> list[Document]:
    return chunker.run(documents=[Document(content=body, meta={"source": source, "title": title})])["documents"]


def shared_edge(previous: str, following: str) -> str:
    """The longest end of `previous` that `following` starts with."""
    for size in range(min(len(previous), len(following)), 0, -1):
        if following.startswith(previous[-size:]):
            return previous[-size:]
    return ""


@pytest.fixture(scope="module")
def chunker() -> MarkdownChunker:
    return MarkdownChunker(max_tokens=200, overlap_tokens=32, tokenizer_model=MODEL)


@pytest.fixture(scope="module")
def small_chunker() -> MarkdownChunker:
    return MarkdownChunker(max_tokens=40, overlap_tokens=8, tokenizer_model=MODEL)


# breadcrumbs ---------------------------------------------------------------------------------


def test_breadcrumbs_follow_the_heading_path(chunker):
    body = "\n".join(
        [
            "Intro text before any heading.",
            "",
            "# Disk Full",
            "Top level text.",
            "## Diagnosis",
            "Check usage with df.",
            "### Large files",
            "Find them with du.",
            "### Deleted open files",
            "List them with lsof.",
            "## Mitigation",
            "Rotate the logs.",
            "# Appendix",
            "More notes.",
        ]
    )
    chunks = chunk(chunker, body, title="Disk Full Runbook")
    assert [c.meta["breadcrumb"] for c in chunks] == [
        "Disk Full Runbook",  # text before the first heading: the document title
        "Disk Full",
        "Disk Full > Diagnosis",
        "Disk Full > Diagnosis > Large files",
        "Disk Full > Diagnosis > Deleted open files",
        "Disk Full > Mitigation",
        "Appendix",
    ]
    assert chunks[0].content == "Intro text before any heading."
    assert chunks[4].content == "List them with lsof."
    assert chunks[4].meta["headings"] == ["Disk Full", "Diagnosis", "Deleted open files"]
    assert chunks[2].meta["section_kind"] == "diagnosis"
    assert chunks[5].meta["section_kind"] == "mitigation"


def test_hash_lines_inside_code_fences_are_not_headings(chunker):
    body = "\n".join(
        [
            "# Cleanup",
            "## Steps",
            "Run this:",
            "",
            "```bash",
            "# find the biggest folders",
            "du -xh / | sort -h | tail",
            "## not a heading either",
            "```",
            "",
            "~~~",
            "# tilde fence comment",
            "~~~",
            "Done.",
        ]
    )
    chunks = chunk(chunker, body)
    assert [c.meta["breadcrumb"] for c in chunks] == ["Cleanup > Steps"]
    assert "# find the biggest folders" in chunks[0].content
    assert "## not a heading either" in chunks[0].content
    assert "# tilde fence comment" in chunks[0].content


def test_sections_with_only_a_heading_give_no_chunk(chunker):
    chunks = chunk(chunker, "# Title\n## Empty\n## Filled\nSome text.\n")
    assert [c.meta["breadcrumb"] for c in chunks] == ["Title > Filled"]


def test_chunk_metadata(chunker):
    document = Document(
        content="# Disk Full\n## Diagnosis\nCheck df.\n## Fix\nRotate logs.",
        meta={"source": "disk/disk-full.md", "title": "Disk Full", "category": "disk", "keywords": ["df"]},
    )
    chunks = chunker.run(documents=[document])["documents"]
    assert [c.meta["chunk_index"] for c in chunks] == [0, 1]
    for c in chunks:
        assert c.id == c.meta["evidence_key"]
        assert len(c.id) == 32
        assert c.meta["content_hash"] == hashlib.sha256(c.content.encode()).hexdigest()[:16]
        assert c.meta["category"] == "disk" and c.meta["keywords"] == ["df"]  # document meta carried over
    assert chunks[1].meta["embed_header"] == "Disk Full > Fix"


def test_invalid_sizes_are_rejected():
    with pytest.raises(ValueError):
        MarkdownChunker(max_tokens=8)
    with pytest.raises(ValueError):
        MarkdownChunker(max_tokens=64, overlap_tokens=64)


# size limit and overlap ----------------------------------------------------------------------


def test_no_chunk_exceeds_max_tokens(small_chunker):
    body = (
        "# Long\n## Section\n"
        + long_paragraphs()
        + "\n\n```\n"
        + "\n".join(f"line {i}: value={i * 7}" for i in range(40))
        + "\n```\n"
    )
    chunks = chunk(small_chunker, body)
    assert len(chunks) > 5
    counts = [tokens(c.content) for c in chunks]
    assert max(counts) <= 40, counts


def test_sample_knowledge_base_chunks_fit_the_default_limit(chunker):
    documents = MarkdownKnowledgeReader(kb_path=str(SAMPLE_KB)).run()["documents"]
    chunks = chunker.run(documents=documents)["documents"]
    assert len(chunks) > len(documents)
    assert max(tokens(c.content) for c in chunks) <= 200


def test_chunks_record_their_token_count(small_chunker):
    """The count the context packer relies on at query time: exact, for single and split sections."""
    body = "# Doc\n## Short\nOne line.\n## Long\n" + long_paragraphs()
    chunks = chunk(small_chunker, body)
    assert len(chunks) > 3
    assert [c.meta["tokens"] for c in chunks] == [tokens(c.content) for c in chunks]


def test_long_section_windows_overlap(small_chunker):
    text = long_paragraphs()
    windows = small_chunker.split_text(text)
    assert len(windows) >= 5
    for previous, following in zip(windows, windows[1:], strict=False):
        edge = shared_edge(previous, following)
        # The next window starts with text from the end of the previous one: about overlap_tokens of it.
        assert edge, (previous, following)
        assert 8 <= tokens(edge) <= 16 + 2, edge
    # Together the windows cover the whole text, start to end.
    assert text.startswith(windows[0])
    assert text.endswith(windows[-1])


def test_no_overlap_when_overlap_is_zero():
    chunker = MarkdownChunker(max_tokens=40, overlap_tokens=0, tokenizer_model=MODEL)
    text = long_paragraphs(paragraphs=3)
    windows = chunker.split_text(text)
    assert len(windows) >= 3
    joined = " ".join(windows).split()
    assert joined == text.split()  # every word exactly once


def test_long_cjk_section_advances_window_by_window(small_chunker):
    """Regression: the overlap start walked back over every CJK character, one window per token."""
    # Chinese prose without spaces or punctuation: the CJK characters of a sample runbook.
    source = (SAMPLE_KB / "disk" / "filesystem-read-only-remount.md").read_text(encoding="utf-8")
    text = "".join(char for char in source if is_cjk(char))[:600]
    total = tokens(text)
    windows = small_chunker.split_text(text)
    assert all(tokens(w) <= 40 for w in windows)
    # Each window advances by at least max_tokens - 2 * overlap_tokens.
    assert len(windows) <= total // (40 - 2 * 8) + 2, len(windows)
    for previous, following in zip(windows, windows[1:], strict=False):
        assert 1 <= tokens(shared_edge(previous, following)) <= 16
    assert text.startswith(windows[0]) and text.endswith(windows[-1])


# evidence keys -------------------------------------------------------------------------------

DOC = """# Disk Full
Disk usage alerts fire at 90 percent.
## Diagnosis
Run df -h and du -xh to find the largest folders.
## Mitigation
Rotate the logs and remove old images.
"""


def keys_by_breadcrumb(chunks: list[Document]) -> dict[str, str]:
    return {c.meta["breadcrumb"]: c.meta["evidence_key"] for c in chunks}


def test_same_input_gives_same_keys(chunker):
    first = chunk(chunker, DOC)
    again = chunk(MarkdownChunker(max_tokens=200, overlap_tokens=32, tokenizer_model=MODEL), DOC)
    assert [c.id for c in first] == [c.id for c in again]
    assert len({c.id for c in first}) == len(first)


def test_editing_one_section_keeps_the_other_keys(chunker):
    before = keys_by_breadcrumb(chunk(chunker, DOC))
    edited = DOC.replace("Run df -h and du -xh", "Run df -h, df -i and du -xh")
    after = keys_by_breadcrumb(chunk(chunker, edited))
    assert after["Disk Full > Diagnosis"] != before["Disk Full > Diagnosis"]
    assert after["Disk Full"] == before["Disk Full"]
    assert after["Disk Full > Mitigation"] == before["Disk Full > Mitigation"]


def test_inserting_a_section_keeps_the_other_keys(chunker):
    before = keys_by_breadcrumb(chunk(chunker, DOC))
    inserted = DOC.replace("## Mitigation", "## Impact\nWrites fail.\n## Mitigation")
    after = keys_by_breadcrumb(chunk(chunker, inserted))
    assert {k: after[k] for k in before} == before


def test_identical_text_in_two_sections_gives_different_keys(chunker):
    body = "# Runbook\n## Primary\nRestart the service.\n## Replica\nRestart the service.\n"
    chunks = chunk(chunker, body)
    assert [c.content for c in chunks] == ["Restart the service.", "Restart the service."]
    assert chunks[0].id != chunks[1].id


def test_repeated_heading_and_text_give_different_keys(chunker):
    body = "# Runbook\n## Step\nRestart the service.\n## Step\nRestart the service.\n"
    chunks = chunk(chunker, body)
    assert [c.meta["breadcrumb"] for c in chunks] == ["Runbook > Step", "Runbook > Step"]
    assert chunks[0].id != chunks[1].id


def test_same_text_in_two_documents_gives_different_keys(chunker):
    one = chunk(chunker, DOC, source="disk/a.md")
    two = chunk(chunker, DOC, source="disk/b.md")
    assert not {c.id for c in one} & {c.id for c in two}


def test_split_by_characters_keeps_every_character_but_the_cut_spaces():
    text = "ab " * 50
    pieces = split_by_characters(text.strip(), 20)
    assert all(len(piece) <= 20 for piece in pieces)
    assert " ".join(pieces) == text.strip()
    assert split_by_characters("x" * 45, 20) == ["x" * 20, "x" * 20, "x" * 5]


def test_chunker_cuts_a_window_over_max_chars():
    chunker = MarkdownChunker(tokenizer_model=MODEL, max_chars=1000)
    windows = chunker.split_text_with_counts(" ".join("y" * 300 for _ in range(10)))
    assert len(windows) >= 3 and all(len(text) <= 1000 for text, _ in windows)


class TestMarkdownChunkerInit:
    @pytest.mark.parametrize(
        ("parameter", "value", "bound"), [("min_tokens", -1, 0), ("max_chars", 0, 1), ("max_chars", -3, 1)]
    )
    def test_refuses_a_size_under_its_bound(self, parameter, value, bound):
        with pytest.raises(ValueError, match=f"^{parameter}={value} must be at least {bound}$"):
            MarkdownChunker(**{parameter: value})


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("max_tokens", 8, "at least 16"),
    ("overlap_tokens", 500, "[0, max_tokens)"),
    ("overlap_tokens", -1, "[0, max_tokens)"),
    ("min_tokens", -1, "at least 0"),
    ("tokenizer_model", "", "non-empty"),
    ("max_chars", 0, "at least 1"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(lambda **changed: MarkdownChunker(**{**{}, **changed}), parameter, value, rule)
