"""Bad input: unusable knowledge bases, unusable files, and a Milvus Lite db held by another process."""

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from components.indexing.markdown_reader import KnowledgeBaseError, MarkdownKnowledgeReader
from components.stores.milvus_collection import connect
from components.stores.milvus_errors import MilvusUnavailableError
from pipelines.indexing import run_indexing
from tests.helpers import child_env, cli_command, ids_by_source, run_cli, stderr_lines

GOOD_DOC = "# Good {n}\n\nThe service restarts cleanly after step {n}.\n"


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def assert_one_clean_line(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    lines = stderr_lines(result)
    assert result.returncode == code, result.stderr
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("knowledge: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


# knowledge bases that cannot be indexed at all ----------------------------------------------


def test_missing_knowledge_base(tmp_path, make_config):
    cfg = make_config(f"kb.path={tmp_path / 'nowhere'}")
    with pytest.raises(KnowledgeBaseError, match="does not exist"):
        run_indexing(cfg)
    with pytest.raises(KnowledgeBaseError, match="does not exist"):
        MarkdownKnowledgeReader(kb_path=str(tmp_path / "nowhere")).run()
    assert not Path(cfg.milvus.uri).exists()  # failed before opening anything


def test_knowledge_base_without_markdown(tmp_path, make_config):
    kb = tmp_path / "kb"
    write(kb / "notes.txt", "# Not markdown\n")
    write(kb / ".git" / "README.md", "# In a hidden folder\n\nText.\n")
    cfg = make_config(f"kb.path={kb}")
    with pytest.raises(KnowledgeBaseError, match="holds no markdown"):
        run_indexing(cfg)
    assert not Path(cfg.milvus.uri).exists()


def test_knowledge_base_that_is_a_file(tmp_path, make_config):
    path = write(tmp_path / "single.md", "# One file\n\nText.\n")
    with pytest.raises(KnowledgeBaseError, match="not a folder"):
        run_indexing(make_config(f"kb.path={path}"))


def test_knowledge_base_whose_markdown_all_leads_outside(tmp_path, make_config):
    outside = write(tmp_path / "outside" / "doc.md", "# Outside\n\nText.\n")
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "link.md").symlink_to(outside)
    with pytest.raises(KnowledgeBaseError, match="holds no markdown"):
        run_indexing(make_config(f"kb.path={kb}"))


@pytest.fixture(scope="module")
def cli_kb_errors(tmp_path_factory):
    """`knowledge index` on a missing KB and on a KB without markdown, run side by side."""
    root = tmp_path_factory.mktemp("cli-kb-errors")
    empty = root / "empty-kb"
    write(empty / "readme.txt", "no markdown here\n")
    cases = {"missing": root / "missing-kb", "empty": empty}
    processes = {
        name: subprocess.Popen(
            cli_command("index", "--kb", str(kb), f"paths.state_dir={root / name}", "mlflow=off"),
            cwd=root,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, kb in cases.items()
    }
    results = {}
    for name, process in processes.items():
        stdout, stderr = process.communicate(timeout=300)
        results[name] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return root, results


def test_cli_missing_knowledge_base_exits_2(cli_kb_errors):
    root, results = cli_kb_errors
    line = assert_one_clean_line(results["missing"], 2, "does not exist", str(root / "missing-kb"))
    assert results["missing"].stdout == ""
    assert not (root / "missing").exists()  # no state written
    assert line


def test_cli_knowledge_base_without_markdown_exits_2(cli_kb_errors):
    _, results = cli_kb_errors
    assert_one_clean_line(results["empty"], 2, "holds no markdown")


# unusable files are skipped with a reason ------------------------------------------------------


@pytest.fixture
def messy_kb(tmp_path) -> Path:
    kb = tmp_path / "kb"
    write(kb / "ops" / "good-1.md", GOOD_DOC.format(n=1))
    write(kb / "ops" / "good-2.md", "---\ntitle: Second\n---\n" + GOOD_DOC.format(n=2))
    write(kb / "ops" / "latin1.md", "# Café\n\nCafé au lait.\n".encode("latin-1"))
    write(kb / "ops" / "broken-yaml.md", "---\ntitle: [unclosed\n---\n# Broken\n\nText.\n")
    write(kb / "ops" / "only-headings.md", "# Title\n\n## Section\n\n### Sub\n")
    write(kb / "ops" / "only-frontmatter.md", "---\ntitle: Nothing Else\ncategory: ops\n---\n")
    write(kb / "ops" / "zero-bytes.md", b"")
    (kb / "ops" / "dangling.md").symlink_to(kb / "ops" / "gone.md")  # target inside the KB, missing
    outside = tmp_path / "outside"
    write(outside / "secret.md", "# Outside\n\nNot part of the KB.\n")
    write(outside / "folder" / "doc.md", "# Outside folder\n\nNot part of the KB either.\n")
    (kb / "ops" / "outside-file.md").symlink_to(outside / "secret.md")
    (kb / "linked-folder").symlink_to(outside / "folder", target_is_directory=True)
    (kb / "ops-alias").symlink_to(kb / "ops", target_is_directory=True)  # inside: not followed, no duplicates
    return kb


EXPECTED_SKIPS = {
    "ops/latin1.md": "invalid UTF-8",
    "ops/broken-yaml.md": "invalid YAML frontmatter",
    "ops/only-headings.md": "empty document",
    "ops/only-frontmatter.md": "empty document",
    "ops/zero-bytes.md": "empty document",
    "ops/dangling.md": "broken symlink",
    "ops/outside-file.md": "symlink points outside the knowledge base",
    "linked-folder": "symlink points outside the knowledge base",
}


def test_reader_skips_unusable_files_with_reasons(messy_kb):
    result = MarkdownKnowledgeReader(kb_path=str(messy_kb)).run()
    assert sorted(d.meta["source"] for d in result["documents"]) == ["ops/good-1.md", "ops/good-2.md"]
    reasons = {s.source: s.reason for s in result["skipped"]}
    assert set(reasons) == set(EXPECTED_SKIPS)
    for source, reason in EXPECTED_SKIPS.items():
        assert reasons[source].startswith(reason), (source, reasons[source])
    assert "byte 5" in reasons["ops/latin1.md"]  # where the bad byte is
    assert "line 2" in reasons["ops/broken-yaml.md"]  # where the YAML breaks
    assert all("\n" not in reason for reason in reasons.values())


def test_indexing_skips_unusable_files_and_indexes_the_rest(messy_kb, index_kb):
    cfg, report = index_kb(messy_kb)
    assert sorted(report.added) == ["ops/good-1.md", "ops/good-2.md"]
    assert {s.source for s in report.skipped} == set(EXPECTED_SKIPS)
    assert set(ids_by_source(cfg)) == {"ops/good-1.md", "ops/good-2.md"}
    assert report.collection_count == report.chunks_written == 2

    # Fixing a skipped file indexes it on the next run; the good ones stay unchanged.
    write(messy_kb / "ops" / "broken-yaml.md", "---\ntitle: Fixed\n---\n# Fixed\n\nNow valid.\n")
    _, report = index_kb(messy_kb)
    assert report.added == ["ops/broken-yaml.md"]
    assert sorted(report.unchanged) == ["ops/good-1.md", "ops/good-2.md"]
    assert "ops/broken-yaml.md" not in {s.source for s in report.skipped}


def test_unreadable_file_is_skipped(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("runs as root: chmod 000 does not make a file unreadable for root")
    kb = tmp_path / "kb"
    write(kb / "a" / "good.md", GOOD_DOC.format(n=1))
    locked = write(kb / "a" / "locked.md", GOOD_DOC.format(n=2))
    locked.chmod(0)
    try:
        result = MarkdownKnowledgeReader(kb_path=str(kb)).run()
    finally:
        locked.chmod(0o644)
    assert [s.source for s in result["skipped"]] == ["a/locked.md"]
    assert result["skipped"][0].reason.startswith("unreadable")


# a Milvus Lite db held by another process ------------------------------------------------------

HOLDER = """
import sys, time
from pymilvus import MilvusClient
client = MilvusClient(uri=sys.argv[1])
print("holding", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def held_db(tmp_path_factory):
    """A Milvus Lite db opened by another process, which holds it until the module ends."""
    db = tmp_path_factory.mktemp("held") / "milvus.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        ready, _, _ = select.select([holder.stdout], [], [], 120)
        line = holder.stdout.readline() if ready else ""
        if line.strip() != "holding":
            pytest.fail(f"the holder process did not open {db} within 120 s: {line!r}")
        yield db
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_connect_names_the_lock_holder(held_db):
    """Regression: the lock error stayed in Milvus Lite's log; the raised message named no cause."""
    with pytest.raises(MilvusUnavailableError, match="held by another process") as raised:
        connect(str(held_db))
    # It names what can hold a db, and no command that does not exist.
    assert "(a running server or index)" in str(raised.value) and "knowledge serve" not in str(raised.value)


def test_cli_index_on_a_held_db_exits_1(held_db, small_kb, tmp_path):
    result = run_cli(
        "index",
        "--kb",
        str(small_kb),
        f"milvus.uri={held_db}",
        f"paths.state_dir={tmp_path / 'state'}",
        "mlflow=off",
        cwd=tmp_path,
    )
    assert_one_clean_line(result, 1, "held by another process", str(held_db))
