"""The printed summary of a search, on hand-made trials: the title, a row per trial, the notes under the tables."""

from pipelines.tuning.guards import Constraint
from pipelines.tuning.recommend import Verdict
from pipelines.tuning.search import Judged, SearchResult, format_search
from pipelines.tuning.space import SearchSpace
from pipelines.tuning.sweep import Trial

GUARD = Constraint.parse("no_evidence_rate@off>=0.9")
SPACE = SearchSpace("thresholds", "hit@1", "maximize", {"retrieval.evidence_threshold": {"choices": [0.1, 0.5]}})


def trial(number: int, threshold: float, hit: float, no_evidence: float, current: bool = False) -> Trial:
    sets = {"dev": {"answerable": 4, "hit@1": hit}, "off": {"off_topic": 10, "no_evidence_rate": no_evidence}}
    setting = [f"retrieval.evidence_threshold={threshold}"]
    return Trial(
        setting,
        setting,
        {"hit@1": hit, "mrr@10": hit},
        sets=sets,
        feasible=no_evidence >= 0.9,
        number=number,
        current=current,
    )


def result(trials: list[Trial], best: Trial | None, **extra) -> SearchResult:
    defaults = next(t for t in trials if t.current)
    judged = {
        "default on tuning": Judged(defaults.metrics, {"dev": defaults.sets["dev"]}),
        "default on held-out": Judged({}, {}),
    }
    roles = {"dev": "tuning", "off": "guard"}
    return SearchResult(SPACE, [GUARD], trials, best, judged, "s1", "sqlite:///study.db", None, None, roles, **extra)


def test_trials_are_listed_feasible_first_then_best_first_with_the_guards_they_break():
    trials = [trial(0, 0.35, 0.5, 0.95, current=True), trial(1, 0.1, 0.75, 0.5), trial(2, 0.5, 0.6, 1.0)]
    verdict = Verdict(None, "the current settings are the best setting tried")
    lines = format_search(result(trials, trials[2], verdict=verdict, repeats=2)).splitlines()
    assert lines[0] == (
        "5 trials of search=thresholds (study s1 in sqlite:///study.db), 3 distinct settings, "
        f"2 feasible under {GUARD.label}; hit@1 on dev:"
    )
    assert lines[1].split() == ["trial", "hit@1", "mrr@10", GUARD.label, "feasible", "setting"]
    assert [line.split() for line in lines[2:5]] == [
        ["2", "0.600", "0.600", "1.000", "yes", "retrieval.evidence_threshold=0.5"],
        ["0", "0.500", "0.500", "0.950", "yes", "retrieval.evidence_threshold=0.35", "(current)"],
        ["1", "0.750", "0.750", "0.500", "NO:", GUARD.label, "retrieval.evidence_threshold=0.1"],
    ]
    assert lines[5].startswith("best vs defaults")
    assert lines[-2:] == ["2 trials drew a setting already evaluated and were not re-run", *verdict.lines()]


def test_without_a_feasible_trial_the_notes_say_there_is_no_best():
    trials = [trial(0, 0.35, 0.5, 0.5, current=True)]
    verdict = Verdict(None, "no setting tried met the constraints")
    lines = format_search(result(trials, None, verdict=verdict)).splitlines()
    assert "0 feasible under" in lines[0]
    assert lines[-2:] == [
        "no trial met the constraints: no best setting (more --trials, a wider space or other bounds)",
        *verdict.lines(),
    ]
    assert not any("drew a setting" in line for line in lines)
