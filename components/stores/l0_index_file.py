"""
The L0 index on disk: a JSON file of the entries plus one summary vector per document in a
`.npy` array beside it, written atomically, and a handle that reloads it when the file changes.
"""

import functools
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from components.errors import BadInputError, first_line
from components.stores.l0_index import L0Entry, L0Index

logger = logging.getLogger(__name__)

L0_FORMAT_VERSION = 1


class L0IndexMissingError(BadInputError, FileNotFoundError):
    """The query side found no L0 index: the knowledge base has not been indexed yet."""


class L0IndexDamagedError(BadInputError):
    """The L0 index file cannot be read (cut short by a crash or a full disk, or edited by hand)."""


def summary_vectors_path(index_path: str | Path) -> Path:
    path = Path(index_path)
    return path.with_name(path.name.removesuffix(".json") + ".summaries.npy")


def save_l0_index(index: L0Index, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "version": L0_FORMAT_VERSION,
        "model": index.model,
        "entries": [asdict(entry) for entry in index.entries],
        "term_df": index.term_df,
        "domain_precision": index.domain_precision,
        "joined_words": None if index.joined_words is None else sorted(index.joined_words),
    }
    _atomic_write(path, json.dumps(payload, ensure_ascii=False, indent=1).encode("utf-8"))
    vectors_path = summary_vectors_path(path)
    if index.summary_vectors is not None:
        tmp = vectors_path.with_name(vectors_path.name + ".tmp.npy")
        np.save(tmp, index.summary_vectors.astype(np.float32))
        os.replace(tmp, vectors_path)
    elif vectors_path.exists():
        vectors_path.unlink()


def load_l0_index(path: str | Path) -> L0Index:
    path = Path(path)
    if not path.is_file():
        raise L0IndexMissingError(f"no L0 index at {path}: run `knowledge index` first")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        entries = [L0Entry.from_dict(e) for e in payload["entries"]]
    except (ValueError, KeyError, TypeError) as exc:  # truncated or edited: JSON, UTF-8 or shape errors
        raise L0IndexDamagedError(
            f"the L0 index {path} is damaged ({first_line(exc)}): run `knowledge index` to write it again"
        ) from exc
    vectors_path = summary_vectors_path(path)
    try:
        vectors = np.load(vectors_path) if vectors_path.is_file() else None
    except (OSError, ValueError, EOFError) as exc:  # overwritten or cut: numpy's words name no file, nor a way out
        raise L0IndexDamagedError(
            f"the L0 summary vectors {vectors_path} are damaged (not a readable NumPy array): "
            "run `knowledge index` to write them again"
        ) from exc
    if vectors is not None and vectors.ndim != 2:
        raise L0IndexDamagedError(
            f"the L0 summary vectors {vectors_path} are damaged (an array of shape {vectors.shape}, not one row "
            "per document): run `knowledge index --rebuild` to write them again"
        )
    if vectors is not None and len(vectors) != len(entries):
        logger.warning("L0 summary vectors at %s do not match the entries; ignoring them", vectors_path)
        vectors = None
    return L0Index(
        entries,
        vectors,
        payload.get("model", ""),
        payload.get("term_df"),
        payload.get("domain_precision"),
        payload.get("joined_words"),
        path=path,
    )


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@functools.lru_cache(maxsize=8)
def _shared_l0_index(path: Path, stamp: tuple[int, int]) -> L0Index:
    """
    One loaded index per file version, for every handle of the process: the lookup pipeline's
    components each hold a handle of the same file, and each load prepares the whole index again.
    An L0Index is not changed once loaded, so sharing it is safe.
    """
    return load_l0_index(path)


class L0IndexHandle:
    """
    Lazily loads an L0 index and reloads it when the file changes (a re-index under a running
    server), at the cost of one `stat` per `get`. Handles of the same file share the loaded index.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._index: L0Index | None = None

    @property
    def loaded(self) -> bool:
        return self._index is not None

    def get(self) -> L0Index:
        try:
            stat = self.path.stat()
        except FileNotFoundError as exc:
            raise L0IndexMissingError(f"no L0 index at {self.path}: run `knowledge index` first") from exc
        stamp = (stat.st_mtime_ns, stat.st_size)
        if self._index is None or stamp != self._stamp:
            self._index = _shared_l0_index(self.path.resolve(), stamp)
            self._stamp = stamp
        return self._index


def check_summary_dimension(index: L0Index, dimension: int) -> None:
    """
    Summary vectors of another dimension than the query embedding's (another model's file, or
    one replaced by hand) cannot be compared with it: refuse them, naming the file.
    """
    vectors = index.summary_vectors
    if vectors is not None and vectors.shape[1] != dimension:
        where = summary_vectors_path(index.path) if index.path is not None else "(built in memory)"
        raise L0IndexDamagedError(
            f"the L0 summary vectors {where} are {vectors.shape[1]}-d, the query "
            f"embedding {dimension}-d: run `knowledge index` to write them again"
        )
