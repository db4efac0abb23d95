"""A Milvus Lite db as its folder: a damaged collection named, on a real Lite db (a read-only one: test_damaged_state.py)."""

import subprocess
import sys

import pytest

from components.stores.lite_db import collection_folder, damaged_collection, damaged_error, read_only_folder
from components.stores.milvus_collection import connect


def test_a_writable_folder_is_not_read_only_and_a_missing_db_is_judged_by_its_nearest_folder(tmp_path):
    assert read_only_folder(str(tmp_path / "state" / "milvus.db")) is None


def test_a_collection_whose_manifests_do_not_load_is_named(tmp_path):
    uri = str(tmp_path / "milvus.db")
    # Created by another process: Milvus Lite reads a collection's manifest when a process opens the db.
    create = f"from components.stores.milvus_collection import connect, create_collection; create_collection(connect({uri!r}), 'probe', dim=4)"
    subprocess.run([sys.executable, "-c", create], check=True, capture_output=True)
    folder = collection_folder(uri, "probe")
    for name in ("manifest.json", "manifest.json.prev"):
        (folder / name).write_text("garbage{", encoding="utf-8")
    with pytest.raises(Exception) as raised:
        connect(uri).has_collection("probe")
    assert damaged_collection(raised.value) == folder
    assert "run `knowledge index --rebuild`" in str(damaged_error(raised.value))
    assert damaged_error(LookupError("another failure")) is None
