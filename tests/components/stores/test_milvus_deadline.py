"""One deadline for a lookup's wait on a Milvus server: what each call gets, and the caller's bound."""

import threading

import pytest

from components.stores.milvus_deadline import call_timeout, lookup_deadline, within
from components.stores.milvus_errors import MilvusUnavailableError

SERVER = "http://127.0.0.1:19530"


def test_without_a_deadline_each_call_gets_the_whole_limit():
    assert call_timeout(2500) == 2.5
    assert call_timeout(0) is None


def test_inside_a_deadline_each_call_gets_what_is_left_and_an_inner_one_does_not_extend_it():
    with lookup_deadline(2000):
        first = call_timeout(2000)
        with lookup_deadline(60_000):
            assert call_timeout(60_000) <= first <= 2.0


def test_an_operation_that_outlives_the_deadline_is_left_behind_with_the_reason():
    release = threading.Event()
    try:
        with pytest.raises(MilvusUnavailableError, match=r"did not answer within milvus.timeout_ms \(50 ms\)"):
            within(SERVER, 50, lambda: release.wait(60))
    finally:
        release.set()


def test_the_deadline_reaches_the_calls_made_in_the_operations_thread():
    seen = within(SERVER, 30_000, lambda: call_timeout(30_000))
    assert seen is not None and seen <= 30.0


def test_an_error_before_the_deadline_is_the_operations_own():
    def fail():
        raise LookupError("collection knowledge does not exist")

    with pytest.raises(LookupError, match="does not exist"):
        within(SERVER, 30_000, fail)


def test_milvus_lite_runs_inline():
    assert within(".knowledge/milvus.db", 50, threading.current_thread) is threading.current_thread()
