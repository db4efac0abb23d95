"""
pymilvus' known noise on Milvus Lite stays out of the logs; its other warnings do not. The records
are caught on the noisy logger itself: pymilvus' own loggers do not propagate to the root logger
(its `settings.init_log`), so a root handler would see nothing either way.
"""

import contextlib
import logging

ITERATOR_LOGGER = "pymilvus.client.iterator.query_iterator"


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def handled_by(name: str):
    """
    The warnings a handler on logger `name` receives (after that logger's filters), whatever level
    an in-process CLI run of an earlier test left on pymilvus' loggers (it quiets them).
    """
    noisy, collect = logging.getLogger(name), _Collect()
    level = noisy.level
    noisy.setLevel(logging.WARNING)
    noisy.addHandler(collect)
    try:
        yield collect.messages
    finally:
        noisy.removeHandler(collect)
        noisy.setLevel(level)


def test_reindexing_logs_no_mvccts_warning(index_kb, small_kb):
    index_kb(small_kb)
    with handled_by(ITERATOR_LOGGER) as messages:
        index_kb(small_kb)  # the re-index plan iterates over the collection
    assert not [m for m in messages if "mvccTs" in m]


def test_the_known_noise_is_dropped_and_other_iterator_warnings_still_reach_the_log():
    import components.stores.milvus_collection  # noqa: F401  (installs the filter)

    with handled_by(ITERATOR_LOGGER) as messages:
        logging.getLogger(ITERATOR_LOGGER).warning("failed to get mvccTs from milvus server, use client-side ts")
        logging.getLogger(ITERATOR_LOGGER).warning("iterator cp file is not existed")
    assert messages == ["iterator cp file is not existed"]
