"""
The guard fitted to the knowledge base (pipelines/tuning/guard_fit.py) on hand-made metrics, and the
config errors of a guard that does not exist or does not parse.
"""

import shutil

import pytest

from pipelines.config.settings import CONF_DIR, ConfigError, load_config
from pipelines.tuning.guard_fit import fit_guard, fit_query_sets
from pipelines.tuning.guards import Constraint, QuerySet, feasible

FLOOR = Constraint.parse("no_evidence_rate>=0.95", "guard.constraints")


def _sets() -> list[QuerySet]:
    return [
        QuerySet("dev", "dev.jsonl", [], "tuning"),
        QuerySet("offtopic-alerts", "eval/offtopic-alerts.jsonl", [], "guard"),
        QuerySet("built", "built.jsonl", [], "guard"),
    ]


CURRENT = {
    "offtopic-alerts": {"off_topic": 46, "no_evidence_rate": 17 / 46},  # the knowledge base answers most of it
    "built": {"off_topic": 120, "no_evidence_rate": 0.983},
}


def test_a_guard_set_the_knowledge_base_answers_is_left_out_and_the_others_are_relative(make_config):
    fit = fit_guard(make_config(), _sets(), [], CURRENT)
    assert [s.name for s in fit.sets] == ["dev", "built"]
    assert [c.label for c in fit.constraints] == ["no_evidence_rate@built>=0.973"]
    assert feasible(fit.constraints, {"built": {"off_topic": 120, "no_evidence_rate": 0.975}})
    assert not feasible(fit.constraints, {"built": {"off_topic": 120, "no_evidence_rate": 0.95}})
    left_out, in_effect = fit.lines()
    assert left_out.startswith("guard offtopic-alerts left out: the knowledge base answers its texts")
    assert "rejects 17 of 46, 0.370 < guard.min_fit=0.8" in left_out and "knowledge guard build --kb DIR" in left_out
    assert in_effect == (
        "guard in effect: built (built.jsonl): the current settings reject 118 of 120 (0.983); "
        "a setting must keep no_evidence_rate@built>=0.973"
    )


def test_an_absolute_floor_is_an_option_and_a_null_tolerance_drops_the_relative_bound(make_config):
    fit = fit_guard(make_config("guard.tolerance=null", "guard.min_fit=0.3"), _sets(), [FLOOR], CURRENT)
    assert [s.name for s in fit.sets] == ["dev", "offtopic-alerts", "built"]
    assert [c.label for c in fit.constraints] == ["no_evidence_rate>=0.95"]


def test_a_search_set_is_bounded_below_the_lowest_of_its_parts_and_a_floor_stays_absolute(make_config):
    tuning = {"dev": {"answerable": 30, "off_topic": 14, "answer_rate": 0.9, "no_evidence_rate": 0.5}}
    held_out = {"dev": {"answerable": 10, "off_topic": 6, "answer_rate": 1.0, "no_evidence_rate": 0.333}}
    metrics = ["no_evidence_rate", "answer_rate"]
    constraints, lines = fit_query_sets(make_config(), metrics, [tuning, held_out], [FLOOR])
    assert [c.label for c in constraints] == ["no_evidence_rate@dev>=0.323", "answer_rate@dev>=0.89"]
    assert feasible(constraints, tuning) and feasible(constraints, held_out)  # the current settings keep them
    assert lines == [
        "bounds on dev: the current settings get no_evidence_rate 0.333, answer_rate 0.900; relative: a setting "
        "must keep no_evidence_rate@dev>=0.323, answer_rate@dev>=0.89 (guard.tolerance=0.01); "
        "absolute: no_evidence_rate>=0.95 (guard.constraints)"
    ]
    unbounded, (line,) = fit_query_sets(make_config("guard.tolerance=null"), metrics, [tuning], [])
    assert unbounded == [] and line.endswith("; no relative bound (guard.tolerance=null)")


def test_no_guard_set_says_so_and_how_to_build_one(make_config):
    fit = fit_guard(make_config("guard=none"), [QuerySet("dev", "dev.jsonl", [], "tuning")], [], {})
    assert fit.lines() == [
        "guard in effect: no guard set; build one that fits: knowledge guard build --kb DIR, then guard=built "
        "(docs/tuning.md#guard-sets)"
    ]


@pytest.mark.parametrize("override", ["guard.tolerance=1.5", "guard.min_fit=2"])
def test_guard_bounds_are_shares(override):
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        load_config([override])


def test_an_unknown_guard_lists_the_guards_and_a_broken_one_names_its_file(tmp_path):
    with pytest.raises(ConfigError) as unknown:
        load_config(["guard=nosuch"])
    assert str(unknown.value).endswith("Could not find 'guard/nosuch'; the choices are built, none, runbooks")

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "guard" / "mine.yaml").write_text("sets: [a\nconstraints: ]]\n", encoding="utf-8")
    with pytest.raises(ConfigError) as broken:
        load_config(["guard=mine"], config_dir=conf)
    assert "while parsing a flow sequence" in str(broken.value)
    assert f'in "{conf / "guard" / "mine.yaml"}", line 1' in str(broken.value)


def test_the_ab_changed_queries_say_right_or_wrong_on_each_side():
    from pipelines.evaluation.metrics import EvalQuery, Ranked
    from pipelines.tuning.ab import AbReport, QueryChange, _right, format_ab, html_report

    query = EvalQuery(query="disk full", relevant={"disk.md"}, kind="answerable", id="q1")
    a, b = Ranked(sources=["cpu.md"], answered=True), Ranked(sources=["disk.md"], answered=True)
    change = QueryChange(
        "q1", "disk full", "answerable", "cpu.md", "disk.md", True, True, _right(query, a), _right(query, b)
    )
    off_topic = EvalQuery(query="bake bread", relevant=set(), kind="off_topic", id="q2")
    assert _right(off_topic, Ranked(sources=[], answered=False)) and not _right(off_topic, a)
    report = AbReport({"a": [], "b": ["x=1"], "base": []}, "q.jsonl", {}, [change], verdict="no detectable difference")
    assert "  q1         wrong -> right: cpu.md -> disk.md" in format_ab(report).splitlines()
    assert "<td>wrong &rarr; right</td>" in html_report(report)


def test_guard_built_before_it_is_built_says_how_to_build_it(make_config, tmp_path):
    from pipelines.tuning.guards import guard_sets

    cfg = make_config("guard=built", state_dir=tmp_path / "state")
    with pytest.raises(ConfigError, match="built.jsonl not found in .*knowledge guard build --kb DIR"):
        guard_sets(cfg, [], [])
