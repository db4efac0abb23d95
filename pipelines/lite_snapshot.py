"""
Reading a Milvus Lite database that another process holds (a running `knowledge serve`): Milvus
Lite lets one process open a db folder, so `eval`, `compare` and `traces rerun` read a snapshot copy
of it instead, taken without its lock file and removed when they are done.

A server only reads the collection, so the copy is the state it serves. A process that writes
(`knowledge index`) holds the lock too; a copy taken during a write may miss that write.

    with snapshot_overrides(cfg, say=print) as extra:
        cfg = load_config([*overrides, *extra])
"""

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from components.stores.milvus_collection import is_local_uri, is_locked_elsewhere, opened_here

SNAPSHOTS = "lite-snapshots"


@contextmanager
def snapshot_overrides(cfg, say: Callable[[str], None]) -> Iterator[list[str]]:
    """`milvus.uri=<copy>` while another process holds the configured Lite db, else nothing; the copy goes at exit."""
    uri = str(cfg.milvus.uri)
    if not is_local_uri(uri) or not Path(uri).is_dir() or opened_here(uri) or not is_locked_elsewhere(uri):
        yield []
        return
    parent = Path(cfg.paths.state_dir) / SNAPSHOTS
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="snapshot-", dir=parent))
    copy = folder / Path(uri).name
    try:
        shutil.copytree(uri, copy, ignore=shutil.ignore_patterns("LOCK"))
        say(
            f"the Milvus Lite database {uri} is held by another process (a running `knowledge serve`?): "
            f"reading a snapshot copy of it, {copy}"
        )
        yield [f"milvus.uri={copy}"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
