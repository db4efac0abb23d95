"""How a process of the project logs: on stderr, masked, with the libraries that repeat our one-line errors kept quiet."""

import logging
import sys

from components.common.masking import mask_handlers

# Loggers that write for errors we report ourselves in one line (pymilvus and milvus_lite log an
# ERROR with a traceback), and the chatty ones kept at WARNING.
QUIET_LOGGERS = ("pymilvus", "grpc", "milvus_lite")
CHATTY_LOGGERS = ("httpx", "urllib3", "sentence_transformers", "haystack")
# On a failed run Haystack snapshots the pipeline state for debugging and warns about every
# field it cannot serialize; the failure itself is reported (and recorded) in one line.
SNAPSHOT_LOGGERS = ("haystack.utils.base_serialization", "haystack.core.pipeline.breakpoint")


def configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    mask_handlers(logging.getLogger())  # every logger's records reach stderr through the root's handler
    if verbosity >= 2:
        return
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    for name in SNAPSHOT_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
