"""
The contracts' two dict shapes come from their field declarations: camelCase for the agent,
snake_case field names for the persisted record.
"""

import copy
import json

import pytest

from components.common.serialization import JSON, RECORD, serialize
from components.contracts import (
    IndexReport,
    L0Hints,
    QueryTransform,
    RetrievalAttempt,
    SidecarReport,
    SkippedFile,
)

# rerankTrace[].boosts maps rerank signal names (configuration values, `rerank.weights` keys) to
# their contributions: its keys are data, not field names, and keep their spelling.
DATA_KEY_PATHS = {("rerankTrace", "boosts")}


def test_omit_none_keeps_zero_and_false():
    attempt = RetrievalAttempt(0, None, None, "q", "sdk", 0, 0, None, "no_evidence")
    data = serialize(attempt, JSON)
    assert "error" not in data and data["index"] == 0 and data["filter"] is None and data["category"] is None
    assert serialize(attempt, RECORD)["error"] is None


def test_query_transform_and_l0_hints_are_camel_case_for_the_agent():
    transform = QueryTransform(raw="r", normalized="n", variants=["n"], original_chars=1)
    assert transform.to_dict()["originalChars"] == 1 and transform.to_record()["original_chars"] == 1
    assert set(L0Hints().to_dict()) == {
        "matchedTitles",
        "matchedKeywords",
        "domains",
        "entities",
        "matchedSources",
        "namedSources",
        "uncoveredTerms",
        "domainRules",
    }


def test_the_needed_sections_of_a_query_transform_stay_out_of_the_result_and_the_row():
    transform = QueryTransform("why", "why", ["why"], needed_sections=frozenset({"diagnosis"}))
    assert "neededSections" not in transform.to_dict() and "needed_sections" not in transform.to_record()
    assert copy.deepcopy(transform).needed_sections == {"diagnosis"}


def test_sidecar_report_keys_are_camel_case_in_json_and_snake_case_in_the_record():
    report = SidecarReport(
        status="ok",
        path="haystack",
        main_path="sdk",
        results=[{"evidence_key": "k", "score_label": "s"}],
        comparison={"overlap_ratio": 1.0, "score_semantics": {"main": "a"}},
    )
    assert report.to_dict() == {
        "status": "ok",
        "path": "haystack",
        "mainPath": "sdk",
        "error": None,
        "results": [{"evidenceKey": "k", "scoreLabel": "s"}],
        "comparison": {"overlapRatio": 1.0, "scoreSemantics": {"main": "a"}},
    }
    assert report.to_record()["comparison"] == {"overlap_ratio": 1.0, "score_semantics": {"main": "a"}}


def test_index_report_keeps_its_snake_case_shape():
    report = IndexReport([], [], [], [], [SkippedFile("a.md", "empty")], 1, 0, 1, 0.5)
    assert report.to_dict()["skipped"] == [{"source": "a.md", "reason": "empty"}]
    assert report.to_dict()["chunks_written"] == 1


def snake_case_keys(value, path: tuple[str, ...] = ()) -> list[str]:
    """Every dict key with an underscore, with its path; the keys of DATA_KEY_PATHS are skipped."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if "_" in key:
                found.append(".".join((*path, key)))
            if (*path[-1:], key) not in DATA_KEY_PATHS:
                found += snake_case_keys(item, (*path, key))
    elif isinstance(value, list):
        for item in value:
            found += snake_case_keys(item, path)
    return found


@pytest.mark.parametrize("query", ["disk almost full on a worker node", "best pizza in town"])
def test_no_snake_case_key_in_the_agent_facing_json_of_a_real_lookup(sample_service, query):
    data = json.loads(json.dumps(sample_service.lookup(query).to_dict()))
    assert snake_case_keys(data) == []
    assert data["queryTransform"] and data["l0Hints"] and "retrievalTrace" in data


def test_snake_case_keys_finds_nested_keys_but_not_signal_names():
    data = {"a": [{"b_c": 1}], "rerankTrace": [{"boosts": {"name_match": 0.5}}]}
    assert snake_case_keys(data) == ["a.b_c"]
