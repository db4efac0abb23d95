"""The printed ranking of a sweep, on hand-made trials: the columns, the guard cells, the notes under the table."""

from pipelines.tuning.guards import Constraint
from pipelines.tuning.recommend import Verdict
from pipelines.tuning.sweep import SweepResult, Trial, format_ranking

GUARD = Constraint.parse("no_evidence_rate@off>=0.9")


def trial(threshold: float, hit: float, no_evidence: float | None, current: bool = False) -> Trial:
    sets = {"off": {"off_topic": 10, "no_evidence_rate": no_evidence}}
    feasible = no_evidence is not None and no_evidence >= 0.9
    swept = [f"retrieval.evidence_threshold={threshold}"]
    return Trial(swept, swept, {"hit@1": hit}, sets=sets, feasible=feasible, current=current)


def result(trials: list[Trial], constraints: list[Constraint], **extra) -> SweepResult:
    return SweepResult(trials, None, "hit@1", runs=None, constraints=constraints, **extra)


def rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()[:1].isdigit()]


def test_feasible_rows_come_first_with_each_guard_value_and_the_broken_guards_named():
    trials = [trial(0.1, 0.9, 0.5), trial(0.35, 0.6, 0.95, current=True), trial(0.5, 0.7, 1.0), trial(0.9, 0.8, None)]
    text = format_ranking(result(trials, [GUARD]), columns=("hit@1",))
    header = text.splitlines()[0]
    assert header.split() == ["#", "combination", "hit@1", GUARD.label, "feasible"]
    first, second, third, fourth = rows(text)
    assert first.split() == ["1", "retrieval.evidence_threshold=0.5", "0.700", "1.000", "yes"]
    assert second.split() == ["2", "retrieval.evidence_threshold=0.35", "0.600", "0.950", "yes", "(current)"]
    assert third.split() == ["3", "retrieval.evidence_threshold=0.1", "0.900", "0.500", "NO:", GUARD.label]
    assert fourth.split() == ["4", "retrieval.evidence_threshold=0.9", "0.800", "-", "NO:", GUARD.label]
    label_end = header.index(GUARD.label) + len(GUARD.label)
    assert first.index("1.000") + len("1.000") == label_end  # a guard's value ends under its label


def test_without_guards_there_is_no_feasible_column():
    text = format_ranking(result([trial(0.2, 0.5, 1.0), trial(0.4, 0.75, 1.0)], []), columns=("hit@1", "mrr@10"))
    assert text.splitlines()[0].split() == ["#", "combination", "hit@1", "mrr@10"]
    assert [line.split() for line in rows(text)] == [
        ["1", "retrieval.evidence_threshold=0.4", "0.750", "-"],
        ["2", "retrieval.evidence_threshold=0.2", "0.500", "-"],
    ]


def test_the_notes_name_the_repeats_the_missing_best_and_the_verdict():
    verdict = Verdict(None, "no setting tried met the constraints")
    sweep = result([trial(0.1, 0.9, 0.5)], [GUARD], repeats=["retrieval.evidence_threshold=0.35"], verdict=verdict)
    notes = format_ranking(sweep).splitlines()[2:]
    assert notes == [
        "not re-run (the same setting as a row above): retrieval.evidence_threshold=0.35",
        f"no combination met the constraints ({GUARD.label}): no best setting",
        *verdict.lines(),
    ]
