"""
Log records of one logger tree held while a call runs, then either shown as they are or folded
into the call's one error line: a command that fails says so in one line on stderr.
"""

import contextlib
import logging
from collections.abc import Iterator


class HeldLogs(logging.Handler):
    """The records of a logger tree, kept back from the root handlers until `show` or `fold`."""

    def __init__(self) -> None:
        super().__init__(level=logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def show(self) -> None:
        """Show the held records as they would have been shown."""
        records, self.records = self.records, []
        for record in records:
            logging.getLogger().handle(record)

    def fold(self) -> list[str]:
        """The messages of the held warnings and errors, to fold into one line (the rest shown as usual)."""
        folded = [record.getMessage() for record in self.records if record.levelno >= logging.WARNING]
        self.records = [record for record in self.records if record.levelno < logging.WARNING]
        self.show()
        return folded


@contextlib.contextmanager
def held_logs(name: str) -> Iterator[HeldLogs]:
    """Hold what the logger `name` and its children log while the block runs (to `show` or `fold` after it)."""
    logger = logging.getLogger(name)
    held = HeldLogs()
    propagate = logger.propagate
    logger.addHandler(held)
    logger.propagate = False
    try:
        yield held
    finally:
        logger.removeHandler(held)
        logger.propagate = propagate
