"""
An index run that dies between two insert batches: the next run re-indexes the half-written
document (its hash matches, its chunk count does not), and the L0 index is only written once
the vector store holds every chunk. The failure is injected at the real insert call.
"""

from pathlib import Path

import pytest
from pymilvus import MilvusClient

from components.indexing import milvus_writer
from tests.helpers import ids_by_source
from tests.integration.test_incremental_indexing import SOURCES, expected_ids


class Killed(RuntimeError):
    """Stands for the process dying between two batches."""


def test_a_run_killed_between_insert_batches_is_completed_by_the_next(small_kb, index_kb, monkeypatch):
    expected = expected_ids(small_kb)
    first = SOURCES[0]
    assert len(expected[first]) >= 2
    # Batches small enough that the first document's chunks are split over two inserts.
    monkeypatch.setattr(milvus_writer, "_BATCH", len(expected[first]) - 1)
    real_insert = MilvusClient.insert
    calls = []

    def insert_then_die(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise Killed("killed between two insert batches")
        return real_insert(self, *args, **kwargs)

    monkeypatch.setattr(MilvusClient, "insert", insert_then_die)
    with pytest.raises(Killed):
        index_kb(small_kb)
    monkeypatch.setattr(MilvusClient, "insert", real_insert)

    cfg, report = index_kb(small_kb)
    assert not Path(cfg.l0.index_path).with_name(Path(cfg.l0.index_path).name + ".tmp").exists()
    partial = ids_by_source(cfg)
    assert partial == expected
    assert first in report.updated and first not in report.unchanged
    assert report.collection_count == sum(len(ids) for ids in expected.values())


def test_the_l0_index_is_not_written_when_the_vector_store_write_fails(small_kb, index_kb, monkeypatch):
    def die(self, *args, **kwargs):
        raise Killed("killed at the first insert")

    monkeypatch.setattr(MilvusClient, "insert", die)
    with pytest.raises(Killed):
        cfg, _ = index_kb(small_kb)
    from pipelines.config.settings import load_config
    from tests.conftest import state_overrides

    cfg = load_config(state_overrides(small_kb.parent / "state", f"kb.path={small_kb}"))
    assert not Path(cfg.l0.index_path).exists()
