"""Markdown sections: heading paths, raw text kept as written, section kinds."""

import pytest

from components.common.markdown_sections import first_heading, is_blank_document, section_kind, split_sections

BODY = """Intro line.

# Title

Opening.

## Diagnosis

```sh
# not a heading
df -h
```

### Check inodes
Run df -i.

## Mitigation
Rotate logs.

# Second top
"""


def test_sections_carry_their_heading_path_level_and_text():
    sections = split_sections(BODY)
    assert [(s.headings, s.level, s.text) for s in sections] == [
        ([], 0, "Intro line."),
        (["Title"], 1, "Opening."),
        (["Title", "Diagnosis"], 2, "```sh\n# not a heading\ndf -h\n```"),
        (["Title", "Diagnosis", "Check inodes"], 3, "Run df -i."),
        (["Title", "Mitigation"], 2, "Rotate logs."),
        (["Second top"], 1, ""),
    ]
    assert sections[3].breadcrumb == "Title > Diagnosis > Check inodes"
    assert sections[0].breadcrumb == ""


def test_setext_headings_count_and_nested_ones_do_not():
    assert [(s.headings, s.text) for s in split_sections("Setext\n=====\n\nbody\n")] == [(["Setext"], "body")]
    (only,) = split_sections("> # quoted\n\n- # in list\n")
    assert only.headings == [] and only.text == "> # quoted\n\n- # in list"


def test_first_heading():
    assert first_heading(BODY) == "Title"
    assert first_heading("no heading at all") is None


def test_blank_document_has_no_text_besides_headings():
    assert is_blank_document("# A\n\n## B\n")
    assert is_blank_document("")
    assert not is_blank_document("# A\ntext")


@pytest.mark.parametrize(
    ("headings", "kind"),
    [
        (["Disk", "How to Diagnose"], "diagnosis"),
        (["Fix", "Details"], "mitigation"),  # the nearest heading naming a kind
        (["Impact"], "impact"),
        (["Meaning"], "overview"),
        (["磁盘", "排查步骤"], "diagnosis"),
        (["Something else"], None),
        ([], None),
    ],
)
def test_section_kind_of_the_nearest_heading_naming_one(headings, kind):
    assert section_kind(headings) == kind
