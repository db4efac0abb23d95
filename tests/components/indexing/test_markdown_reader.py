"""MarkdownKnowledgeReader: frontmatter and the defaults used without it."""

import hashlib
from pathlib import Path

import pytest

from components.indexing.markdown_reader import MarkdownKnowledgeReader
from tests.components.refusals import assert_refused


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def read(kb: Path) -> dict[str, dict]:
    result = MarkdownKnowledgeReader(kb_path=str(kb)).run()
    assert result["skipped"] == []
    return {d.meta["source"]: d for d in result["documents"]}


def test_defaults_without_frontmatter(tmp_path):
    write(tmp_path / "disk" / "disk-full.md", "Some intro.\n\n# Disk Almost Full\n\n## Fix\nRotate logs.\n")
    write(tmp_path / "disk" / "nested" / "deeper" / "raid.md", "# RAID Degraded\n\nReplace the drive.\n")
    write(tmp_path / "overview.md", "# Operations Overview\n\nWhere to start.\n")
    write(tmp_path / "net" / "no_heading-notes.md", "Plain text without any heading.\n")

    docs = read(tmp_path)
    full = docs["disk/disk-full.md"].meta
    assert full["title"] == "Disk Almost Full"  # first heading, even after intro text
    assert full["category"] == "disk"  # top-level folder
    assert full["keywords"] == [] and full["entities"] == []
    assert full["has_frontmatter"] is False
    assert docs["disk/nested/deeper/raid.md"].meta["category"] == "disk"  # top-level folder, not the parent
    assert docs["overview.md"].meta["category"] == "general"  # at the KB root
    assert docs["net/no_heading-notes.md"].meta["title"] == "no heading notes"  # file name as the last resort


def test_frontmatter_values_win(tmp_path):
    write(
        tmp_path / "disk" / "doc.md",
        "---\ntitle: Filesystem Full\ncategory: storage\nkeywords: [disk full, enospc]\n---\n# Other Heading\n\nText.\n",
    )
    write(tmp_path / "root.md", "---\ncategory: platform\n---\n# Root Doc\n\nText.\n")
    docs = read(tmp_path)
    meta = docs["disk/doc.md"].meta
    assert (meta["title"], meta["category"], meta["keywords"]) == (
        "Filesystem Full",
        "storage",
        ["disk full", "enospc"],
    )
    assert meta["has_frontmatter"] is True
    assert docs["disk/doc.md"].content.startswith("# Other Heading")  # the body has no frontmatter
    assert docs["root.md"].meta["category"] == "platform"
    assert docs["root.md"].meta["title"] == "Root Doc"


def test_keywords_as_comma_string_are_split(tmp_path):
    write(tmp_path / "a" / "one.md", '---\nkeywords: "disk full,  no space left , ,enospc"\n---\nText.\n')
    write(tmp_path / "a" / "two.md", "---\nkeywords: single\n---\nText.\n")
    write(tmp_path / "a" / "three.md", "---\nkeywords: [a b, 42]\n---\nText.\n")
    docs = read(tmp_path)
    assert docs["a/one.md"].meta["keywords"] == ["disk full", "no space left", "enospc"]
    assert docs["a/two.md"].meta["keywords"] == ["single"]
    assert docs["a/three.md"].meta["keywords"] == ["a b", "42"]


def test_entities_as_strings_or_name_with_aliases(tmp_path):
    write(
        tmp_path / "db" / "pg.md",
        "---\n"
        "entities:\n"
        "  - PgBouncer\n"
        "  - name: PostgreSQL\n"
        "    aliases: [postgres, pg]\n"
        "  - name: Patroni\n"
        '    aliases: "patronictl, ha"\n'
        "  - aliases: [nameless]\n"
        "---\nText.\n",
    )
    write(tmp_path / "db" / "one.md", "---\nentities: Redis\n---\nText.\n")
    docs = read(tmp_path)
    assert docs["db/pg.md"].meta["entities"] == [
        {"name": "PgBouncer", "aliases": []},
        {"name": "PostgreSQL", "aliases": ["postgres", "pg"]},
        {"name": "Patroni", "aliases": ["patronictl", "ha"]},
    ]
    assert docs["db/one.md"].meta["entities"] == [{"name": "Redis", "aliases": []}]


def test_doc_hash_and_id_follow_the_file_bytes(tmp_path):
    path = write(tmp_path / "a" / "doc.md", "# Title\n\nText.\n")
    first = read(tmp_path)["a/doc.md"]
    assert first.meta["doc_hash"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert first.id == first.meta["doc_hash"]
    write(path, "# Title\n\nOther text.\n")
    assert read(tmp_path)["a/doc.md"].meta["doc_hash"] != first.meta["doc_hash"]


def test_title_and_category_text_is_cleaned(tmp_path):
    write(tmp_path / "a" / "doc.md", "---\ntitle: \"  Disk\\tFull \"\ncategory: ' disk '\n---\nText.\n")
    meta = read(tmp_path)["a/doc.md"].meta
    assert (meta["title"], meta["category"]) == ("Disk Full", "disk")


def test_frontmatter_after_a_byte_order_mark(tmp_path):
    """Regression: a UTF-8 BOM hid the frontmatter, which then became part of the body and title."""
    write(tmp_path / "a" / "bom.md", b"\xef\xbb\xbf---\ntitle: BOM Title\ncategory: bomcat\n---\n# Heading\n\nBody.\n")
    document = read(tmp_path)["a/bom.md"]
    assert document.meta["title"] == "BOM Title"
    assert document.meta["category"] == "bomcat"
    assert document.content == "# Heading\n\nBody."


def test_hidden_files_and_other_suffixes_are_ignored(tmp_path):
    write(tmp_path / "a" / "doc.md", "# Doc\n\nText.\n")
    write(tmp_path / "a" / "notes.txt", "# Not markdown\n\nText.\n")
    write(tmp_path / "a" / ".draft.md", "# Hidden\n\nText.\n")
    write(tmp_path / ".git" / "README.md", "# Hidden folder\n\nText.\n")
    write(tmp_path / "b" / "upper.MARKDOWN", "# Upper\n\nText.\n")
    assert sorted(read(tmp_path)) == ["a/doc.md", "b/upper.MARKDOWN"]


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("kb_path", "", "non-empty"),
    ("default_category", " ", "non-empty"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(lambda **changed: MarkdownKnowledgeReader(**{**{}, **changed}), parameter, value, rule)
