"""LookupResult: the error form of a result."""

from components.lookup_result import LookupResult


def test_failed_result_shows_the_error_and_no_traces():
    error = {"type": "RuntimeError", "message": "boom", "component": "retriever"}
    data = LookupResult.failure("q", error, invocation_id="i").to_dict()
    assert data == {
        "found": False,
        "evidenceStatus": "error",
        "message": "Knowledge lookup failed in retriever: boom",
        "error": error,
        "evidenceBlocks": [],
        "invocationId": "i",
    }
