"""The L0 index on disk: JSON entries, summary vectors beside them, atomic writes, reloading on change."""

import json
import logging
import os

import numpy as np
import pytest

from components.contracts import EntityRef
from components.stores.l0_index import L0Entry, L0Index
from components.stores.l0_index_file import (
    L0_FORMAT_VERSION,
    L0IndexHandle,
    L0IndexMissingError,
    load_l0_index,
    save_l0_index,
    summary_vectors_path,
)

ENTRIES = [
    L0Entry(
        "db/replication-lag.md",
        "Replication Lag",
        "db",
        keywords=["wal"],
        entities=[EntityRef("PostgreSQL", ["pg"])],
        headings=["Replication Lag"],
        terms=["lag", "replication"],
        doc_hash="h1",
    ),
    L0Entry("disk/full.md", "Disk Full", "disk", terms=["disk", "full"]),
]


def index(vectors: np.ndarray | None = None, **kwargs) -> L0Index:
    return L0Index(
        ENTRIES,
        vectors,
        kwargs.get("model", "packaged:all-MiniLM-L6-v2"),
        term_df={"disk": 1, "lag": 1},
        domain_precision={"db": 1.0, "disk": 0.5},
        joined_words={"mysql", "replicaset"},
    )


def test_summary_vectors_lie_beside_the_json_file(tmp_path):
    assert summary_vectors_path(tmp_path / "kb.l0.json") == tmp_path / "kb.l0.summaries.npy"
    assert summary_vectors_path("x/kb") == summary_vectors_path("x/kb.json")


def test_save_and_load_round_trip(tmp_path):
    path = tmp_path / "nested" / "kb.l0.json"
    vectors = np.arange(8, dtype=np.float64).reshape(2, 4)
    save_l0_index(index(vectors), path)

    loaded = load_l0_index(path)
    assert loaded.entries == ENTRIES
    assert loaded.entries[0].entities == [EntityRef("PostgreSQL", ["pg"])]
    assert loaded.model == "packaged:all-MiniLM-L6-v2"
    assert loaded.term_df == {"disk": 1, "lag": 1}
    assert loaded.domain_precision == {"db": 1.0, "disk": 0.5}
    assert loaded.joined_words == {"mysql", "replicaset"}
    assert loaded.summary_vectors.dtype == np.float32 and np.array_equal(loaded.summary_vectors, vectors)
    assert json.loads(path.read_text(encoding="utf-8"))["version"] == L0_FORMAT_VERSION
    assert sorted(p.name for p in path.parent.iterdir()) == ["kb.l0.json", "kb.l0.summaries.npy"]  # no temp files


def test_an_index_without_vectors_removes_the_old_vector_file(tmp_path):
    path = tmp_path / "kb.l0.json"
    save_l0_index(index(np.ones((2, 4))), path)
    save_l0_index(index(None), path)
    assert not summary_vectors_path(path).exists()
    assert load_l0_index(path).summary_vectors is None


def test_vectors_that_do_not_match_the_entries_are_ignored_with_a_warning(tmp_path, caplog):
    path = tmp_path / "kb.l0.json"
    save_l0_index(index(None), path)
    np.save(summary_vectors_path(path), np.ones((3, 4), dtype=np.float32))
    with caplog.at_level(logging.WARNING, logger="components.stores.l0_index_file"):
        loaded = load_l0_index(path)
    assert loaded.summary_vectors is None
    assert "do not match the entries" in caplog.text


def test_a_missing_index_says_to_index_first(tmp_path):
    with pytest.raises(L0IndexMissingError, match="run `knowledge index` first"):
        load_l0_index(tmp_path / "none.json")
    with pytest.raises(L0IndexMissingError, match="run `knowledge index` first"):
        L0IndexHandle(tmp_path / "none.json").get()


def test_the_handle_reuses_the_loaded_index_until_the_file_changes(tmp_path):
    path = tmp_path / "kb.l0.json"
    save_l0_index(index(None), path)
    handle = L0IndexHandle(str(path))
    first = handle.get()
    assert handle.get() is first

    save_l0_index(index(None, model="another-model"), path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a distinct mtime on coarse clocks
    reloaded = handle.get()
    assert reloaded is not first and reloaded.model == "another-model"


def test_handles_of_one_file_share_its_loaded_index(tmp_path, monkeypatch):
    path = tmp_path / "kb.l0.json"
    save_l0_index(index(None), path)
    shared = L0IndexHandle(path).get()
    monkeypatch.chdir(tmp_path)
    # Another handle, the path relative: the index is not loaded and prepared again.
    assert L0IndexHandle("kb.l0.json").get() is shared

    save_l0_index(index(None, model="another-model"), path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert L0IndexHandle(path).get().model == "another-model"
