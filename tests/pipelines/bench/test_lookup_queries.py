"""
The crafted queries of `bench lookup`: which candidates are made, when crafting stops, and the rule
that a path with fewer than `MIN_DISTINCT_CASES` distinct queries is reported as not measured,
by the bench's printout and by `bench all`'s table. Fake services: no model, no Milvus.
"""

from types import SimpleNamespace

from pipelines.bench.all_table import _lookup_rows
from pipelines.bench.corpus import CorpusFile
from pipelines.bench.lookup_bench import format_lookup_figures, measure_paths
from pipelines.bench.lookup_queries import (
    MIN_DISTINCT_CASES,
    LookupCase,
    craft_cases,
    lookup_query_candidates,
    opening_sentence,
    pick_cases,
    too_few_cases,
)

RUNBOOK = "---\ntitle: Disk Full\n---\n\n# DiskFull\n\n## Meaning\n\nThe `disk` of a host is almost full. More.\n"


class PathService:
    """A lookup service whose retrieval trace says the path the query's prefix names."""

    def __init__(self):
        self.looked_up: list[str] = []

    def lookup(self, query: str):
        self.looked_up.append(query)
        path = query.split(":")[0]
        attempt = SimpleNamespace(category_filter=None if path == "unfiltered" else "c", filter_expression="f")
        reason = "filtered_vector_no_evidence" if path == "fallback" else None
        return SimpleNamespace(retrieval_trace=SimpleNamespace(attempts=[attempt], fallback_reason=reason))


class Floor:
    def run_case(self, case):
        return case.query


def _cases(path: str, queries: list[str]) -> list[LookupCase]:
    return [LookupCase(query, path, "f", None) for query in queries]


def test_a_path_with_too_few_distinct_cases_is_marked_and_one_with_enough_is_not():
    cases = _cases("fallback", ["a", "b", "a", "b"]) + _cases("filtered", ["x", "y", "z"])
    assert too_few_cases(cases, "fallback") == {"too_few_cases": 2, "min_cases": MIN_DISTINCT_CASES}
    assert too_few_cases(cases, "filtered") is None
    assert too_few_cases(cases, "unfiltered") == {"too_few_cases": 0, "min_cases": MIN_DISTINCT_CASES}


def test_pick_cases_cycles_the_distinct_cases_of_one_path():
    cases = _cases("filtered", ["x", "y"]) + _cases("fallback", ["a"])
    assert [c.query for c in pick_cases(cases, "filtered", 5)] == ["x", "y", "x", "y", "x"]
    assert pick_cases(cases, "unfiltered", 5) == []


def test_a_path_with_one_distinct_query_is_not_timed_and_prints_not_measured():
    service, printed = PathService(), []
    cases = _cases("filtered", ["q1", "q2", "q3"]) + _cases("fallback", ["only"])
    paths = measure_paths(service, {"floor": Floor()}, cases, queries=6, echo=printed.append)
    assert paths["fallback"] == {"too_few_cases": 1, "min_cases": 3}
    assert "only" not in service.looked_up and paths["filtered"]["queries"] == 6
    assert "p50_ratio" in paths["filtered"] and "meets_target" in paths["filtered"]
    assert printed == ["fallback: NOT MEASURED: only 1 distinct crafted queries took the fallback path (3 needed)"]


def _figures(paths: dict) -> dict:
    return {
        "chunks": 100,
        "copies": 1,
        "top_k": 20,
        "index_s": 1.0,
        "settle_s": 1.0,
        "candidates": 10,
        "crafted_queries": {"filtered": 0, "fallback": 1, "unfiltered": 9},
        "fallback_reasons": {},
        "paths": paths,
        "peak_rss_mb": 100.0,
        "load_avg_start": 1.0,
        "load_avg_end": 1.0,
    }


def test_the_printout_and_the_bench_all_table_say_not_measured_without_a_ratio_or_verdict():
    paths = {"filtered": {"too_few_cases": 0, "min_cases": 3}, "fallback": {"too_few_cases": 1, "min_cases": 3}}
    printed = format_lookup_figures(_figures(paths))
    assert "NOT MEASURED: only 1 distinct crafted queries took the fallback path (3 needed)" in printed
    assert "ratio" not in printed and "meets" not in printed and "OVER" not in printed
    rows = [r for r in _lookup_rows(_figures(paths)) if r["part"] == "lookup"]
    assert [r["value"] for r in rows] == [
        "not measured: 0 distinct crafted queries (3 needed)",
        "not measured: 1 distinct crafted queries (3 needed)",
    ]
    assert all(r["ratio"] is None and r["verdict"] == "-" for r in rows)


def test_crafting_stops_once_every_path_has_enough_and_passes_over_a_satisfied_path():
    candidates = {
        "filtered": ["filtered:1", "filtered:2", "unfiltered:1", "filtered:3", "filtered:4"],
        "fallback": ["fallback:1", "fallback:2", "fallback:3", "fallback:4", "fallback:5"],
    }
    service = PathService()
    cases = craft_cases(service, candidates, wanted=2)
    assert [c.path for c in cases] == ["filtered", "fallback", "filtered", "fallback"]
    candidates["filtered"] = ["filtered:1", "unfiltered:1", "unfiltered:2", "filtered:2", "filtered:3", "filtered:4"]
    service = PathService()
    craft_cases(service, candidates, wanted=3)
    # Once fallback has three, its candidates are passed over while filtered ones go on.
    assert service.looked_up == [
        "filtered:1",
        "fallback:1",
        "unfiltered:1",
        "fallback:2",
        "unfiltered:2",
        "fallback:3",
        "filtered:2",
        "filtered:3",
    ]


def test_crafting_runs_out_of_candidates_without_looping():
    cases = craft_cases(PathService(), {"filtered": ["filtered:1"], "fallback": []}, wanted=3)
    assert [c.query for c in cases] == ["filtered:1"]


def test_candidates_are_distinct_per_copy_and_drawn_from_the_corpus_too():
    def runbook(category, name, sentence):
        return CorpusFile(category, f"{name}.md", f"# {name}\n\n## Meaning\n\n{sentence}.\n")

    files = [
        CorpusFile("general", "DiskFull.md", RUNBOOK),
        runbook("alertmanager", "FailedReload", "Reloading the configuration failed"),
        runbook("alertmanager", "FailedToSend", "Notifications are not sent"),
        runbook("etcd", "NoLeader", "The etcd cluster has no leader for a minute"),
        runbook("etcd", "Quota", "The keyspace is near its storage quota"),
        runbook("etcd", "Fsync", "Fsync of the write ahead log is slow"),
    ]
    candidates = lookup_query_candidates(files, copies=2)
    for texts in candidates.values():
        assert len(texts) == len(set(texts))
    assert "etcd-1: The keyspace is near its storage quota" in candidates["filtered"]
    # A fallback names one of the two smallest categories with another category's topic.
    assert "general-0: The etcd cluster has no leader for a minute" in candidates["fallback"]
    assert "alertmanager-1: The keyspace is near its storage quota" in candidates["fallback"]
    assert not any(text.startswith("etcd-") for text in candidates["fallback"])
    assert "general-1: disk almost full on the host" in candidates["fallback"]
    assert not any(text.startswith("node-") for texts in candidates.values() for text in texts)


def test_the_opening_sentence_skips_front_matter_headings_and_markup():
    assert opening_sentence(RUNBOOK) == "The disk of a host is almost full"
    assert opening_sentence("# Title only\n") is None
