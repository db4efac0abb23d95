"""The per-query comparison of `pipelines.bench.server_parity`, on results shaped as it records them."""

from pipelines.bench.server_parity import against, compare, hit_at_1, summary_row
from pipelines.evaluation.metrics import EvalQuery


def result(*evidence, found: bool = True) -> dict:
    return {
        "found": found,
        "fallback": None,
        "legs": ["dense"],
        "evidence": [list(e) for e in evidence],
        "sources": [e[0].split("#")[0] for e in evidence],
    }


QUERIES = [EvalQuery("disk full", {"disk.md"}, "answerable"), EvalQuery("cert expiry", {"cert.md"}, "answerable")]
FILE = [result(("disk.md#1", 0.8, 1, 7.0)), result(("cert.md#2", 0.7, None, None))]


def test_a_query_differs_when_its_evidence_order_or_a_score_does():
    moved = [result(("disk.md#1", 0.8, 1, 7.0)), result(("cert.md#2", 0.7001, None, None))]
    assert compare(FILE, FILE) == [] and compare(moved, FILE) == [1]


def test_the_summary_row_counts_identical_queries_and_hit_at_1_per_engine():
    results = {"file": FILE, "grpc": FILE, "file-dense": FILE, "standalone": [FILE[0], result()]}
    row = summary_row("set.jsonl", QUERIES, results, ("file", "grpc", "file-dense", "standalone"))
    assert row == "| set.jsonl | 2 | 2/2 | 1/2 | 1.000 | 1.000 | 1.000 | 0.500 |"


def test_an_off_topic_set_reports_its_not_found_share():
    off_topic = [EvalQuery("bake bread", set(), "off_topic")] * 2
    assert hit_at_1(off_topic, [result(found=False), result(("disk.md#1", 0.4, None, None))]) == "0.500 not found"


def test_against_a_saved_run_names_the_queries_that_differ():
    report = {"set.jsonl": {"file": FILE, "_queries": ["disk full", "cert expiry"]}}
    saved = {"set.jsonl": {"file": [FILE[0], result()]}}
    printed: list[str] = []
    assert against(report, saved, printed.append) == 1
    assert printed == ["set.jsonl file: 1/2 identical to the saved run", "  differs: 'cert expiry'"]
