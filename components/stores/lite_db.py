"""
A Milvus Lite database as the folder it is on disk: why it cannot be opened (a read-only folder,
a damaged collection, a plain file where the folder should be), and what to do about it.

Milvus Lite reports them only as "Open local milvus failed" or with its own loader's words; the
folder is looked at here so that the message names it. It keeps each collection in
`<db>/collections/<name>/` and finds them by their folders: removing a damaged collection's folder
is what lets `knowledge index --rebuild` write it again (see docs/reliability.md).
"""

import logging
import os
import re
from datetime import UTC, datetime
from pathlib import Path

from components.stores.milvus_errors import MilvusUnavailableError, exception_chain

# Milvus Lite's loader, when neither copy of a collection's manifest can be read (the collection
# folder), and when a data file of a collection is not Parquet any more (a file inside it).
_DAMAGED = re.compile(r"failed to load in '([^']+)'")
_DAMAGED_DATA = re.compile(r"Could not open Parquet input source '([^']+)'")

logger = logging.getLogger(__name__)


def read_only_folder(uri: str) -> Path | None:
    """The db folder, or the nearest folder above it that exists, when it is not writable."""
    folder = Path(uri)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return None if os.access(folder, os.W_OK) else folder


def read_only_message(uri: str, folder: Path) -> str:
    return (
        f"the Milvus Lite database {uri} cannot be opened: {folder} is read-only (Milvus Lite writes its lock "
        "and log there even to read); give paths.state_dir a writable folder"
    )


def is_plain_file(uri: str) -> bool:
    """Whether the db is a file where Milvus Lite keeps a folder (copied over, or written by something else)."""
    return Path(uri).exists() and not Path(uri).is_dir()


def plain_file_message(uri: str) -> str:
    return (
        f"the Milvus Lite database {uri} is damaged (a file, not the folder Milvus Lite keeps): "
        "run `knowledge index --rebuild` to move it aside and index again"
    )


def move_plain_file_aside(uri: str) -> Path | None:
    """For a rebuild: a db that is a plain file is renamed beside itself (kept, not deleted); where it went."""
    if not is_plain_file(uri):
        return None
    path = Path(uri)
    aside = path.with_name(f"{path.name}.damaged-{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.getpid()}")
    path.rename(aside)
    logger.warning("Moved the damaged Milvus Lite database %s (a file, not a folder) aside to %s", uri, aside)
    return aside


def damaged_collection(exc: BaseException) -> Path | None:
    """The collection folder Milvus Lite could not load, when `exc` (or its cause) says so."""
    found = _damage(exc)
    return found[0] if found else None


def _damage(exc: BaseException) -> tuple[Path, str] | None:
    """(the damaged collection folder, what does not load) when `exc` or its cause comes from one."""
    for error in exception_chain(exc):
        text = str(getattr(error, "message", None) or error)
        if found := _DAMAGED.search(text):
            return Path(found.group(1)), "neither copy of its manifest loads"
        if (found := _DAMAGED_DATA.search(text)) and (folder := _collection_of(Path(found.group(1)))):
            return folder, f"its data file {found.group(1)} is not Parquet"
    return None


def _collection_of(path: Path) -> Path | None:
    """`<db>/collections/<name>` of a file inside it."""
    parts = path.parts
    if "collections" not in parts[:-1]:
        return None
    at = len(parts) - 1 - parts[::-1].index("collections")
    return Path(*parts[: at + 2]) if at + 1 < len(parts) else None


def damaged_error(exc: BaseException) -> MilvusUnavailableError | None:
    """The error that names a damaged collection and what to do, when `exc` comes from one."""
    found = _damage(exc)
    if found is None:
        return None
    folder, reason = found
    return MilvusUnavailableError(
        f"the Milvus Lite collection {folder} is damaged ({reason}): "
        "run `knowledge index --rebuild` to remove it and index again"
    )


def collection_folder(uri: str, collection: str) -> Path:
    return Path(uri) / "collections" / collection
