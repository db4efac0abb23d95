"""pymilvus' known noise on Milvus Lite stays out of the logs; its other warnings do not."""

import logging


def test_reindexing_logs_no_mvccts_warning(index_kb, small_kb, caplog):
    index_kb(small_kb)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        index_kb(small_kb)  # the re-index plan iterates over the collection
    assert not [r for r in caplog.records if "mvccTs" in r.getMessage()]


def test_other_iterator_warnings_still_reach_the_log(caplog):
    import components.stores.milvus_collection  # noqa: F401  (installs the filter)

    with caplog.at_level(logging.WARNING):
        logging.getLogger("pymilvus.client.iterator.query_iterator").warning("iterator cp file is not existed")
    assert [r.getMessage() for r in caplog.records] == ["iterator cp file is not existed"]
