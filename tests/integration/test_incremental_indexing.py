"""
Incremental re-indexing of a small copy of the sample KB (4 documents, own state per test).

Embedding is the slow part, so each test indexes the copy once and then walks through a few
changes, each re-embedding only what changed.
"""

import shutil
from pathlib import Path

import numpy as np

from components.indexing.markdown_chunker import MarkdownChunker
from components.indexing.markdown_reader import MarkdownKnowledgeReader
from components.stores.l0_index_file import load_l0_index
from tests.conftest import SAMPLE_KB
from tests.helpers import MODEL, collection_rows, ids_by_source

SOURCES = [
    "cpu/runaway-process.md",
    "database/postgresql-replication-lag.md",
    "disk/disk-full.md",
    "disk/inode-exhaustion.md",
]
EDITED = "disk/disk-full.md"


def expected_ids(kb, **chunking) -> dict[str, set[str]]:
    """What the collection should hold: chunk ids per source, computed without Milvus."""
    documents = MarkdownKnowledgeReader(kb_path=str(kb)).run()["documents"]
    chunks = MarkdownChunker(tokenizer_model=MODEL, **chunking).run(documents=documents)["documents"]
    result: dict[str, set[str]] = {}
    for chunk in chunks:
        result.setdefault(chunk.meta["source"], set()).add(chunk.id)
    return result


def index_small(kb, index_kb, *overrides):
    """The small KB indexed from scratch: (cfg, report, ids by source)."""
    cfg, report = index_kb(kb, *overrides)
    assert sorted(report.added) == SOURCES
    assert report.chunks_written == report.collection_count > len(SOURCES)
    ids = ids_by_source(cfg)
    assert ids == expected_ids(kb)
    return cfg, report, ids


def test_unchanged_run_then_edited_documents(small_kb, index_kb):
    kb = small_kb
    cfg, first, ids = index_small(kb, index_kb)

    # A second run with nothing changed writes nothing.
    _, report = index_kb(kb)
    assert sorted(report.unchanged) == SOURCES
    assert (report.added, report.updated, report.removed, report.skipped) == ([], [], [], [])
    assert (report.chunks_written, report.chunks_deleted) == (0, 0)
    assert report.collection_count == first.collection_count
    assert ids_by_source(cfg) == ids

    # One section of one document edited: that document is replaced, the others are untouched.
    path = kb / EDITED
    text = path.read_text(encoding="utf-8")
    marker = "## Impact\n"
    assert marker in text
    path.write_text(text.replace(marker, marker + "\nEvery write on the host fails with ENOSPC.\n"), encoding="utf-8")
    _, report = index_kb(kb)
    assert report.updated == [EDITED]
    assert sorted(report.unchanged) == sorted(set(SOURCES) - {EDITED})
    assert report.added == [] and report.removed == []
    after = ids_by_source(cfg)
    assert after == expected_ids(kb)
    gone = ids[EDITED] - after[EDITED]
    new = after[EDITED] - ids[EDITED]
    assert len(gone) == 1 and len(new) == 1  # the edited section's chunk; other sections keep their keys
    assert not gone & set().union(*after.values())  # the old chunk id is gone from the collection
    assert report.chunks_deleted == len(ids[EDITED])
    assert report.chunks_written == len(after[EDITED])
    for source in set(SOURCES) - {EDITED}:
        assert after[source] == ids[source]
    assert report.collection_count == first.collection_count == sum(len(v) for v in after.values())
    (edited_row,) = [row for row in collection_rows(cfg) if row["id"] in new]
    assert "ENOSPC" in edited_row["content"]

    # A document rewritten from scratch loses every old chunk.
    rewritten = "disk/inode-exhaustion.md"
    before = ids_by_source(cfg)
    (kb / rewritten).write_text(
        "---\ntitle: Inode Exhaustion\n---\n# Inode Exhaustion\n\nDelete small files.\n", encoding="utf-8"
    )
    _, report = index_kb(kb)
    assert report.updated == [rewritten]
    after = ids_by_source(cfg)
    assert not after[rewritten] & before[rewritten]
    assert len(after[rewritten]) == report.chunks_written == 1
    assert report.chunks_deleted == len(before[rewritten])
    assert report.collection_count == sum(len(v) for v in after.values())
    assert {s: after[s] for s in after if s != rewritten} == {s: before[s] for s in before if s != rewritten}


def test_deleted_and_added_documents_then_rebuild(small_kb, index_kb):
    kb = small_kb
    cfg, first, ids = index_small(kb, index_kb)

    removed = "database/postgresql-replication-lag.md"
    (kb / removed).unlink()
    _, report = index_kb(kb)
    assert report.removed == [removed]
    assert sorted(report.unchanged) == sorted(set(SOURCES) - {removed})
    assert report.chunks_deleted == len(ids[removed]) and report.chunks_written == 0
    after = ids_by_source(cfg)
    assert removed not in after
    assert report.collection_count == first.collection_count - len(ids[removed])
    assert removed not in {entry.source for entry in load_l0_index(cfg.l0.index_path).entries}

    added = "memory/oom-killer.md"
    (kb / "memory").mkdir()
    shutil.copy(SAMPLE_KB / added, kb / added)
    _, report = index_kb(kb)
    assert report.added == [added]
    assert sorted(report.unchanged) == sorted(set(SOURCES) - {removed})
    after = ids_by_source(cfg)
    assert after == expected_ids(kb)
    assert report.chunks_written == len(after[added]) and report.chunks_deleted == 0
    l0 = load_l0_index(cfg.l0.index_path)
    assert l0.entry(added).title == "OOM Killer Terminated a Process"
    assert "memory" in l0.categories and "database" not in l0.categories

    # rebuild=True: the collection is dropped and every document indexed again.
    _, report = index_kb(kb, rebuild=True)
    current = sorted(set(SOURCES) - {removed} | {added})
    assert sorted(report.added) == current
    assert report.unchanged == [] and report.updated == [] and report.chunks_deleted == 0
    assert report.chunks_written == report.collection_count == sum(len(v) for v in after.values())
    assert ids_by_source(cfg) == after


def test_chunking_change_reindexes_everything(small_kb, index_kb):
    kb = small_kb
    cfg, first, ids = index_small(kb, index_kb)

    _, report = index_kb(kb, "chunking.max_tokens=100")
    assert sorted(report.updated) == SOURCES
    assert report.unchanged == [] and report.added == []
    after = ids_by_source(cfg)
    assert after == expected_ids(kb, max_tokens=100)
    assert after != ids
    assert report.chunks_deleted == first.collection_count
    assert report.collection_count == report.chunks_written == sum(len(v) for v in after.values())
    assert report.collection_count > first.collection_count  # smaller chunks, more of them

    # Under the new settings the next run is unchanged again.
    _, again = index_kb(kb, "chunking.max_tokens=100")
    assert sorted(again.unchanged) == SOURCES and again.chunks_written == 0


def first_chunk_vectors(cfg) -> dict[str, np.ndarray]:
    return {
        row["metadata"]["source"]: np.asarray(row["vector"], dtype=np.float32)
        for row in collection_rows(cfg, ("id", "metadata", "vector"))
        if row["metadata"]["chunk_index"] == 0
    }


def summary_vectors(cfg) -> dict[str, np.ndarray]:
    index = load_l0_index(cfg.l0.index_path)
    return {entry.source: index.summary_vector(entry.source) for entry in index.entries}


def test_summary_vectors_are_first_chunk_vectors_and_survive_incremental_runs(small_kb, index_kb):
    kb = small_kb
    cfg, _, _ = index_small(kb, index_kb)
    first = summary_vectors(cfg)
    assert sorted(first) == SOURCES
    chunk_vectors = first_chunk_vectors(cfg)
    for source in SOURCES:  # no second embedding of each document: its first chunk stands for it
        assert np.allclose(first[source], chunk_vectors[source], atol=1e-6)

    # A rewritten document gets its new first chunk's vector; the others keep theirs, unembedded.
    rewritten = "disk/inode-exhaustion.md"
    (kb / rewritten).write_text("# Inode Exhaustion\n\nNo inodes left: delete small files.\n", encoding="utf-8")
    _, report = index_kb(kb)
    assert report.updated == [rewritten]
    second = summary_vectors(cfg)
    assert np.allclose(second[rewritten], first_chunk_vectors(cfg)[rewritten], atol=1e-6)
    assert not np.allclose(second[rewritten], first[rewritten], atol=1e-3)
    for source in set(SOURCES) - {rewritten}:
        assert np.array_equal(second[source], first[source])

    # Without the previous L0 index, unchanged documents get their summaries embedded again.
    Path(cfg.l0.index_path).unlink()
    _, report = index_kb(kb)
    assert sorted(report.unchanged) == SOURCES
    third = summary_vectors(cfg)
    assert sorted(third) == SOURCES
    for source in SOURCES:
        assert np.isclose(np.linalg.norm(third[source]), 1.0, atol=1e-3)
        assert float(third[source] @ second[source]) > 0.8  # the same opening, embedded on its own
