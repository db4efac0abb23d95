"""
Reading a Milvus Lite database that another process holds (a running `knowledge serve`): Milvus
Lite lets one process open a db folder, so `eval`, `compare` and `traces rerun` read a snapshot copy
of it instead, taken without its lock file and removed when they are done.

A server only reads the collection, so the copy is the state it serves. A process that writes
(`knowledge index`) holds the lock too; a copy taken during a write may miss that write.

Every copy lives in `<state_dir>/lite-snapshots/snapshot-<pid>-<random>/`: a process killed before
it could remove its copy (SIGKILL, a crash) leaves it there, and the next command that may take a
copy removes those whose process is gone. SIGTERM removes the copy as the normal end does.

    with snapshot_overrides(cfg, say=print) as extra:
        cfg = load_config([*overrides, *extra])
"""

import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from components.errors import KnowledgeFailure
from components.stores.milvus_collection import is_local_uri, is_locked_elsewhere, opened_here

logger = logging.getLogger(__name__)

SNAPSHOTS = "lite-snapshots"
_PREFIX = "snapshot-"


class SnapshotCopyError(KnowledgeFailure):
    """The snapshot copy could not be written (a full disk, a file where its folder should be)."""


@contextmanager
def snapshot_overrides(cfg, say: Callable[[str], None]) -> Iterator[list[str]]:
    """`milvus.uri=<copy>` while another process holds the configured Lite db, else nothing; the copy goes at exit."""
    uri = str(cfg.milvus.uri)
    parent = Path(cfg.paths.state_dir) / SNAPSHOTS
    remove_orphaned_copies(parent)
    if not is_local_uri(uri) or not Path(uri).is_dir() or opened_here(uri) or not is_locked_elsewhere(uri):
        yield []
        return
    with _removed_on_sigterm():
        folder = None
        try:
            folder = _new_copy_folder(parent, uri)
            copy = folder / Path(uri).name
            _copy_db(uri, copy)
            say(
                f"the Milvus Lite database {uri} is held by another process (a running `knowledge serve`?): "
                f"reading a snapshot copy of it, {copy}"
            )
            yield [f"milvus.uri={copy}"]
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)


def remove_orphaned_copies(parent: Path) -> list[Path]:
    """Remove the copies whose process is gone (killed before it could remove its own); the ones removed."""
    if not parent.is_dir():
        return []
    removed = []
    for folder in parent.glob(f"{_PREFIX}*"):
        pid = _owner(folder)
        if pid is None or _alive(pid):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        logger.info("Removed the snapshot copy %s of process %d, which is gone", folder, pid)
        removed.append(folder)
    return removed


def _owner(folder: Path) -> int | None:
    """The process id in a copy folder's name (`snapshot-<pid>-<random>`); None for a name of another form."""
    pid = folder.name.removeprefix(_PREFIX).split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _new_copy_folder(parent: Path, uri: str) -> Path:
    try:
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=parent))
    except OSError as exc:
        raise _copy_error(uri, parent, _reason(exc)) from exc


def _copy_db(uri: str, copy: Path) -> None:
    try:
        shutil.copytree(uri, copy, ignore=shutil.ignore_patterns("LOCK"))
    except shutil.Error as exc:  # copytree goes on past a failed file and reports them all: the first says why
        failures = exc.args[0] if exc.args and isinstance(exc.args[0], list) else []
        reason = str(failures[0][2]) if failures else str(exc)
        more = f" (and {len(failures) - 1} more files)" if len(failures) > 1 else ""
        raise _copy_error(uri, copy.parent, reason + more) from exc
    except OSError as exc:
        raise _copy_error(uri, copy.parent, _reason(exc)) from exc


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _copy_error(uri: str, folder: Path, reason: str) -> SnapshotCopyError:
    return SnapshotCopyError(
        f"cannot take a snapshot copy of the Milvus Lite database {uri} (held by another process) in {folder}: "
        f"{reason}; it needs a writable folder with room for the copy there, or stop the process holding the database"
    )


class _Terminated(SystemExit):
    """SIGTERM as an exit that unwinds (and so removes the copy), with the status a SIGTERM death reports."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


@contextmanager
def _removed_on_sigterm() -> Iterator[None]:
    """While a copy exists, SIGTERM unwinds the command instead of ending it at once (the default)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread
        return

    def terminate(*_args) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
