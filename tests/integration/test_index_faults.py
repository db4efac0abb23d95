"""
Files an index run cannot use are skipped with a reason and the run goes on: a symlink loop, a
FIFO, frontmatter that is a list or a scalar, a category that is a list or longer than the
column. A document of words too long to tokenize is cut so no chunk exceeds `content`'s limit.
"""

import os

import pytest

from components.stores.milvus_collection import MAX_CATEGORY_CHARS, MAX_CONTENT_CHARS
from tests.helpers import collection_rows

GOOD = "# Good\n\nThe service restarts cleanly after a deploy.\n"


@pytest.fixture
def faulty_kb(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "good.md").write_text(GOOD, encoding="utf-8")
    os.symlink("b.md", kb / "a.md")
    os.symlink("a.md", kb / "b.md")
    os.mkfifo(kb / "pipe.md")
    (kb / "list-frontmatter.md").write_text("---\n- a\n- b\n---\n# Listed\n\nText here.\n", encoding="utf-8")
    (kb / "scalar-frontmatter.md").write_text("---\njust a string\n---\n# Scalar\n\nText here.\n", encoding="utf-8")
    (kb / "list-category.md").write_text("---\ncategory: [a, b]\n---\n# Two\n\nText here.\n", encoding="utf-8")
    long_category = "c" * (MAX_CATEGORY_CHARS + 1)
    (kb / "long-category.md").write_text(f"---\ncategory: {long_category}\n---\n# Long\n\nText.\n", encoding="utf-8")
    words = " ".join("w" * 5000 + str(i) for i in range(30))  # about 150,000 characters in few tokens
    (kb / "long-words.md").write_text(f"# Long words\n\n{words}\n", encoding="utf-8")
    return kb


def test_unusable_files_are_skipped_with_a_reason_and_long_chunks_are_cut(faulty_kb, index_kb):
    cfg, report = index_kb(faulty_kb)
    reasons = {skipped.source: skipped.reason for skipped in report.skipped}
    assert reasons["a.md"] == reasons["b.md"] == "symlink loop"
    assert reasons["pipe.md"] == "not a regular file (a FIFO, socket or device)"
    assert reasons["list-frontmatter.md"] == "invalid YAML frontmatter: frontmatter is not a mapping (a list)"
    assert reasons["scalar-frontmatter.md"] == "invalid YAML frontmatter: frontmatter is not a mapping (a str)"
    assert reasons["list-category.md"] == "category must be a single value, not a list"
    assert reasons["long-category.md"] == f"category longer than {MAX_CATEGORY_CHARS} characters"
    assert sorted(report.added) == ["good.md", "long-words.md"]
    rows = collection_rows(cfg)
    long_rows = [row for row in rows if row["metadata"]["source"] == "long-words.md"]
    assert len(long_rows) >= 3
    assert all(len(row["content"]) <= MAX_CONTENT_CHARS for row in rows)
