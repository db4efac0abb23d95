"""
A Milvus Lite database as the folder it is on disk: why it cannot be opened (a read-only folder,
a damaged collection), and what to do about it.

Milvus Lite reports both only as "Open local milvus failed" or with its own loader's words; the
folder is looked at here so that the message names it. It keeps each collection in
`<db>/collections/<name>/` and finds them by their folders: removing a damaged collection's folder
is what lets `knowledge index --rebuild` write it again (see docs/reliability.md).
"""

import os
import re
from pathlib import Path

from components.stores.milvus_collection import MilvusUnavailableError, exception_chain

# Milvus Lite's loader, when neither copy of a collection's manifest can be read.
_DAMAGED = re.compile(r"failed to load in '([^']+)'")


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


def damaged_collection(exc: BaseException) -> Path | None:
    """The collection folder Milvus Lite could not load, when `exc` (or its cause) says so."""
    for error in exception_chain(exc):
        if found := _DAMAGED.search(str(getattr(error, "message", None) or error)):
            return Path(found.group(1))
    return None


def damaged_error(exc: BaseException) -> MilvusUnavailableError | None:
    """The error that names a damaged collection and what to do, when `exc` comes from one."""
    folder = damaged_collection(exc)
    if folder is None:
        return None
    return MilvusUnavailableError(
        f"the Milvus Lite collection {folder} is damaged (neither copy of its manifest loads): "
        "run `knowledge index --rebuild` to remove it and index again"
    )


def collection_folder(uri: str, collection: str) -> Path:
    return Path(uri) / "collections" / collection
