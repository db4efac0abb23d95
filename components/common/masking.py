"""
The one masking of secrets in text that leaves the process: the password of every URL in it
(`scheme://user:PASSWORD@host` becomes `scheme://user:***@host`). Error texts, log records, trace
rows, HTTP bodies and MLflow traces all pass through `masked` (docs/reliability.md).
"""

import logging
import re
from typing import Any

MASK = "***"

# A URL's `user:password@`: the user stops at `:`, the password at the last `@` before the host
# (passwords with a raw `@` happen), neither crosses whitespace, a slash or a quote.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s'\"<>]*):(?P<password>[^/\s'\"<>]+)@")


def masked(text: Any) -> Any:
    """
    The text with the password of every URL in it replaced by `***`; anything not a string as it is.

    >>> masked("cannot open Milvus at http://root:s3cret@db:19530: refused")
    'cannot open Milvus at http://root:***@db:19530: refused'
    """
    if not isinstance(text, str) or "://" not in text:
        return text
    return _URL_PASSWORD.sub(lambda found: f"{found['head']}:{MASK}@", text)


class MaskingFilter(logging.Filter):
    """A handler filter that masks each record's message and traceback before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "://" in message:
            record.msg, record.args = masked(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = masked(record.exc_text)
        return True


def mask_handlers(*loggers: logging.Logger) -> None:
    """Put a `MaskingFilter` on every handler of these loggers (once)."""
    for logger in loggers:
        for handler in logger.handlers:
            if not any(isinstance(f, MaskingFilter) for f in handler.filters):
                handler.addFilter(MaskingFilter())
