"""
The one recommendation rule of sweep, search, A/B and notebook (pipelines/tuning/recommend.py), on
hand-made candidates: feasible on every set and better by the paired sign test, or keep the current settings.
"""

from pipelines.evaluation.metrics import EvalQuery
from pipelines.tuning.guards import Constraint, untested_guards
from pipelines.tuning.mlflow_eval import query_feedback
from pipelines.tuning.recommend import Candidate, Policy, ab_verdict, format_p, recommend

GUARD = [Constraint.parse("no_evidence_rate>=0.95")]
POLICY = Policy("hit@1", 0.05)
KEPT = {"dev": {"answerable": 10, "off_topic": 20, "no_evidence_rate": 1.0}}
BROKEN = {"dev": {"answerable": 10, "off_topic": 20, "no_evidence_rate": 0.5}}


def _candidate(label: str, hits: list[float], sets=KEPT, held_out=None) -> Candidate:
    return Candidate(label, sets, {"dev": hits}, held_out or {})


def test_a_setting_is_recommended_only_when_feasible_and_better_by_the_paired_test():
    current = _candidate("current", [0.0] * 10)
    better = _candidate("x=1", [1.0] * 10)  # 10 wins, no loss: p = 2 / 2**10
    verdict = recommend(current, better, GUARD, POLICY, ["dev"])
    assert verdict.recommended is better and verdict.lines()[-1] == "best setting: x=1"
    assert "p=0.00195" in verdict.reason

    slightly = _candidate("x=2", [1.0] * 2 + [0.0] * 8)  # 2 wins: p = 0.5
    kept = recommend(current, slightly, GUARD, POLICY, ["dev"])
    assert kept.recommended is None and kept.lines() == [f"keep the current settings: {kept.reason}"]
    assert kept.reason.startswith("x=2 is not better at level 0.05 (hit@1 0.200 vs 0.000")

    breaks = recommend(current, _candidate("x=3", [1.0] * 10, BROKEN), GUARD, POLICY, ["dev"])
    assert breaks.recommended is None and "breaks no_evidence_rate>=0.95 on dev" in breaks.reason
    held_out = _candidate("x=4", [1.0] * 10, KEPT, BROKEN)
    assert "on dev (held out)" in recommend(current, held_out, GUARD, POLICY, ["dev"]).reason
    assert recommend(current, None, GUARD, POLICY, ["dev"]).reason == "no setting tried met the constraints"
    broken_current = _candidate("current", [0.0] * 10, BROKEN)
    assert recommend(broken_current, slightly, GUARD, POLICY, ["dev"]).reason.endswith(
        "; note: the current settings break no_evidence_rate>=0.95 on dev"
    )


def test_an_unguarded_best_says_so_and_an_ab_gives_one_verdict():
    current, better = _candidate("current", [0.0] * 10), _candidate("x=1", [1.0] * 10)
    verdict = recommend(current, better, GUARD, POLICY, ["dev"], unguarded=["off-topic constraint ... not tested"])
    assert verdict.lines()[0].startswith("warning: off-topic constraint") and verdict.lines()[-1] == (
        "best setting (unguarded): x=1"
    )
    a, b = _candidate("A", [0.0] * 10), _candidate("B", [1.0] * 10)
    assert ab_verdict(a, a, GUARD, POLICY, ["dev"]) == "no detectable difference (n=10, p=1) on hit@1 at level 0.05"
    assert ab_verdict(a, b, GUARD, POLICY, ["dev"]) == "B is better (n=10, p=0.00195) on hit@1"
    assert ab_verdict(b, a, GUARD, POLICY, ["dev"]) == "B is worse (n=10, p=0.00195) on hit@1"
    broken = _candidate("B", [0.0] * 10, BROKEN)
    assert ab_verdict(a, broken, GUARD, POLICY, ["dev"]).startswith(
        "B is worse: B breaks no_evidence_rate>=0.95 on dev"
    )


def test_a_guard_that_decides_is_quoted_not_the_p_of_a_metric_where_b_is_better():
    a, better_but_broken = _candidate("A", [0.0] * 10), _candidate("B", [1.0] * 2 + [0.0] * 8, BROKEN)
    verdict = ab_verdict(a, better_but_broken, GUARD, POLICY, ["dev"])
    assert verdict == (
        "B is worse: B breaks no_evidence_rate>=0.95 on dev (no_evidence_rate on dev: B 0.500 vs A 1.000)"
    )
    assert "p=" not in verdict  # the hit@1 test (B better, p=0.5) did not decide


def test_p_values_below_0_001_print_as_such():
    assert format_p(0.0000003) == "<0.001" and format_p(0.0625) == "0.0625" and format_p(1.0) == "1"


def test_a_guard_that_cannot_fail_is_detected():
    every_setting_rejects = [KEPT, KEPT]
    (warning,) = untested_guards(GUARD, every_setting_rejects, 20)
    assert "every one of the 20 off-topic queries was rejected at every setting tried" in warning
    assert untested_guards(GUARD, [KEPT, BROKEN], 20) == []
    (few,) = untested_guards(GUARD, [{"dev": {"off_topic": 4, "no_evidence_rate": 0.5}}], 20)
    assert "only 4 off-topic queries (fewer than guard.min_off_topic=20)" in few


def test_a_miss_has_no_first_relevant_rank_feedback_rather_than_0():
    query = EvalQuery(id="q", query="disk full", relevant={"disk.md"}, kind="answerable")
    assert "first_relevant_rank" not in query_feedback(query, ["other.md"], answered=True)
    assert query_feedback(query, ["other.md", "disk.md"], answered=True)["first_relevant_rank"] == 2
