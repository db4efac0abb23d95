"""The per-level reliability table: counted by hand on a made-up set of answers."""

from pipelines.evaluation.metrics import EvalQuery, Ranked
from pipelines.evaluation.reliability import format_reliability, reliability
from pipelines.tuning.runs import evaluation_metrics


def answer(level: str, sources: list[str], ambiguous: bool = False) -> Ranked:
    details = {"level": level, "ambiguous": ambiguous, "cited": sources[:2]}
    return Ranked(sources=sources, answered=level != "none", details=details)


QUERIES = [EvalQuery(f"q{n}", {"right.md"}, "answerable") for n in range(6)] + [EvalQuery("off", set(), "off_topic")]
ANSWERS = [
    answer("high", ["right.md", "b.md"]),  # right first
    answer("high", ["b.md", "c.md", "right.md"]),  # wrong first, right not cited
    answer("medium", ["right.md"]),
    answer("medium", ["b.md", "right.md"], ambiguous=True),  # the competitor was right: cited
    answer("low", ["right.md"]),
    answer("none", []),
    answer("high", ["b.md"]),  # off-topic: not in the table
]


def test_the_table_equals_a_count_by_hand():
    table = reliability(QUERIES, ANSWERS)
    assert table["high"] == {"count": 2, "share": 0.3333, "hit@1": 0.5}
    assert table["medium"] == {"count": 2, "share": 0.3333, "hit@1": 0.5}
    assert table["low"] == {"count": 1, "share": 0.1667, "hit@1": 1.0}
    assert table["none"] == {"count": 1, "share": 0.1667, "hit@1": 0.0}
    assert table["ambiguous"] == {"count": 1, "share": 0.1667, "hit@1": 0.0}
    assert table["cited_rate"] == 0.8  # 4 of the 5 answered queries cite right.md


def test_the_printed_table():
    assert format_reliability(reliability(QUERIES, ANSWERS)).splitlines() == [
        "relevanceLevel    queries    share    hit@1",
        "high                    2    0.333    0.500",
        "medium                  2    0.333    0.500",
        "low                     1    0.167    1.000",
        "none                    1    0.167    0.000",
        "ambiguous               1    0.167    0.000",
        "right document among the cited sources: 0.800 of answered queries",
    ]


def test_a_level_no_query_got_has_no_hit_rate():
    table = reliability(QUERIES[:1], ANSWERS[:1])
    assert table["medium"] == {"count": 0, "share": 0.0, "hit@1": None}
    assert "medium                  0    0.000        -" in format_reliability(table)


def test_mlflow_gets_the_table_as_metrics():
    report = {"systems": {"pipeline": {"hit@1": 0.5}}, "reliability": reliability(QUERIES, ANSWERS)}
    metrics = evaluation_metrics(report)
    assert metrics["reliability.high.share"] == 0.3333 and metrics["reliability.high.hit_at_1"] == 0.5
    assert metrics["reliability.cited_rate"] == 0.8
