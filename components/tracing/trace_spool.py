"""
The local spool that keeps trace records while their database is away, and the dead-letter file
beside it.

- Records are appended to a JSONL file under an fcntl lock (processes may share one spool), each
  naming its database (`_target`: the URL without credentials), so a spool shared by several
  databases replays each record only into its own (`components.tracing.trace_replay`).
- A record the database rejects for its content (not for being away), and the torn tail of a
  line cut by a crash, go to the dead-letter file (`<spool>.dead.jsonl`, with the reason)
  instead of blocking the queue.
"""

import contextlib
import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from components.tracing.label_records import is_label
from components.tracing.trace_records import TRACE_LOST, TRACE_REJECTED, TRACE_SPOOLED, from_jsonable, to_jsonable

logger = logging.getLogger(__name__)

# The spooled record's key naming the database it is meant for (see `target_key`).
TARGET_FIELD = "_target"


class TraceSpool:
    """The spool file of one trace database, and its dead-letter file. Thread-safe."""

    def __init__(self, path: str | Path, target: str, db_label: str) -> None:
        """
        :param path: The append-only JSONL spool.
        :param target: The database this spool's records are meant for (`target_key` of its URL).
        :param db_label: The database as named in the log (its URL without the password).
        """
        self.path = Path(path)
        self.target = target
        self.db_label = db_label
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.dead_letter_path = self.path.with_name(self.path.stem + ".dead.jsonl")
        self._thread_lock = threading.Lock()
        # (size, mtime) of a spool that holds only other databases' records: nothing to replay here.
        self._foreign: tuple[int, int] | None = None

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive use of the spool: a thread lock, and an fcntl lock for other processes."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        with self._thread_lock, open(self.lock_path, "a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def append(self, record: dict[str, Any]) -> str:
        """Keep one record for later: `spooled`, or `lost` when the file cannot take it."""
        data = {**to_jsonable(record), TARGET_FIELD: self.target}
        try:
            with self.lock():
                _append_lines(self.path, [json.dumps(data, ensure_ascii=False, default=str)])
        except OSError as exc:
            logger.error("Trace record %s lost: spool %s not writable (%s)", record.get("id"), self.path, exc)
            return TRACE_LOST
        return TRACE_SPOOLED

    def dead_letter(self, entries: list[dict[str, Any]], reason: str) -> str:
        """Keep records (or torn spool text) the database will never take, with the reason."""
        now = datetime.now(tz=UTC).isoformat()
        lines = [json.dumps({"reason": reason, "at": now, **e}, ensure_ascii=False, default=str) for e in entries]
        try:
            _append_lines(self.dead_letter_path, lines)
        except OSError as exc:
            logger.error("%d trace record(s) lost: %s not writable (%s)", len(entries), self.dead_letter_path, exc)
            return TRACE_LOST
        logger.error(
            "%d trace record(s) refused by %s, kept in %s: %s",
            len(entries),
            self.db_label,
            self.dead_letter_path,
            reason,
        )
        return TRACE_REJECTED

    def pending(self) -> bool:
        """Whether the spool may hold records for this database (not only other databases' ones)."""
        try:
            stat = self.path.stat()
        except OSError:
            return False
        return stat.st_size > 0 and (stat.st_size, stat.st_mtime_ns) != self._foreign

    def is_ours(self, data: dict[str, Any]) -> bool:
        # A record spooled before targets were recorded belongs to whichever database replays it.
        return data.get(TARGET_FIELD, self.target) == self.target

    def ours(self) -> list[dict[str, Any]]:
        """The invocation records waiting for this database, oldest first (labels left out)."""
        records, _torn = self.read()
        return [from_jsonable(data) for data in records if self.is_ours(data) and not is_label(data)]

    def read(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The spool's records, and the torn fragments (a crash mid-append) found between them."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return [], []
        records: list[dict[str, Any]] = []
        torn: list[str] = []
        for line in text.splitlines():
            if line.strip():
                found, fragment = _parse_spool_line(line)
                records += found
                if fragment:
                    torn.append(fragment)
        return records, torn

    def keep_only(self, records: list[dict[str, Any]]) -> None:
        """Rewrite the spool with only these records (call under `lock`)."""
        _rewrite_lines(self.path, [json.dumps(d, ensure_ascii=False, default=str) for d in records])

    def remember_foreign(self) -> None:
        """Note the spool as it is now: what is left in it is other databases' records."""
        try:
            stat = self.path.stat()
        except OSError:
            self._foreign = None
            return
        self._foreign = (stat.st_size, stat.st_mtime_ns) if stat.st_size else None


def _append_lines(path: Path, lines: list[str]) -> None:
    """
    Append whole lines and fsync. A file whose last line was torn by a crash mid-append gets a
    newline first, so the torn part stays alone on its line and the new record stays whole.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab+") as handle:
        handle.seek(0, os.SEEK_END)
        prefix = b""
        if handle.tell() > 0:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                prefix = b"\n"
        handle.write(prefix + "".join(line + "\n" for line in lines).encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())


def _rewrite_lines(path: Path, lines: list[str]) -> None:
    """Replace the file's content with `lines` (truncated to empty when there are none), fsynced."""
    with open(path, "r+", encoding="utf-8") as handle:
        handle.truncate(0)
        handle.write("".join(line + "\n" for line in lines))
        handle.flush()
        os.fsync(handle.fileno())


def _parse_spool_line(line: str) -> tuple[list[dict[str, Any]], str | None]:
    """
    The records of one spool line and its torn fragment, if any. A line written before appends
    started on a fresh line may hold a torn record with a whole one glued to its end: the whole
    one is recovered, only the torn part is returned as the fragment.
    """
    try:
        data = json.loads(line)
        return ([data], None) if isinstance(data, dict) else ([], line)
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    start = line.find('{"id"', 1)
    while start != -1:
        try:
            data, end = decoder.raw_decode(line, start)
        except json.JSONDecodeError:
            data, end = None, -1
        if isinstance(data, dict) and end == len(line):
            return [data], line[:start]
        start = line.find('{"id"', start + 1)
    return [], line
