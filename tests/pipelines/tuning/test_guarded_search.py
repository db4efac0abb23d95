"""
Guarded searches and sweeps on the bundled knowledge/: a tiny space whose unconstrained best (a
low evidence bar: every answerable query answered) also answers every off-topic query.
"""

import json
import uuid
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient

from pipelines.cli import main
from pipelines.config.settings import ConfigError
from pipelines.tuning.guards import Constraint, QuerySet, check_measurable, parse_constraints
from pipelines.tuning.study import IMPORTANCES_ARTIFACT, STUDY_FILE
from tests.conftest import EVAL_DIR, sample_overrides

DATA = Path(__file__).parent.parent / "data"
SPACE = str(DATA / "guarded-space.yaml")
QUERIES = str(EVAL_DIR / "sample-kb.jsonl")
GUARD = str(DATA / "offtopic-sample.jsonl")
# With the uncovered bar as low as the evidence bar, the evidence bar alone decides what is answered.
LOW_UNCOVERED = "retrieval.uncovered_evidence_threshold=0.1"


def _search(capsys, sample_cfg, state, *extra: str) -> tuple[int, str, str]:
    overrides = sample_overrides(sample_cfg, f"paths.state_dir={state}", LOW_UNCOVERED, "guard.sets=[]")
    argv = ["eval", "--queries", QUERIES, "--guard", GUARD, "--search", SPACE, "--seed", "0", *extra]  # k=v extras too
    code = main([*argv, *overrides])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _trial_rows(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip()[:1].isdigit() and "retrieval." in line]


def test_constraints_parse_with_and_without_a_set():
    assert Constraint.parse("no_evidence_rate>=0.95").label == "no_evidence_rate>=0.95"
    scoped = Constraint.parse("hit@1@prometheus-dev <= 0.9")
    assert (scoped.metric, scoped.set_name, scoped.op, scoped.bound) == ("hit@1", "prometheus-dev", "<=", 0.9)
    assert Constraint.parse("hit_at_1>=0.5").metric == "hit@1"
    for bad in ("no_evidence_rate>0.95", "recall@3>=0.5", "answer_rate>=high"):
        with pytest.raises(ConfigError, match="--constraint"):
            Constraint.parse(bad)
    assert parse_constraints(["answer_rate>=0.9"], ["none", "hit@1>=0.5"], "space") == [Constraint.parse("hit@1>=0.5")]
    guard = Constraint.parse("no_evidence_rate>=0.95")
    per_set = {"dev": {"off_topic": 20, "no_evidence_rate": 1.0}, "alerts": {"off_topic": 46, "no_evidence_rate": 0.9}}
    assert guard.value(per_set) == 0.9 and guard.violation(per_set) == pytest.approx(0.05)  # each set must pass


def test_a_guard_with_nothing_to_measure_is_refused(tmp_path, capsys):
    answerable_only = tmp_path / "answerable.jsonl"
    lines = [line for line in Path(QUERIES).read_text().splitlines() if '"answerable"' in line]
    answerable_only.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"no_evidence_rate>=0.95 .* has no off-topic queries"):
        check_measurable([Constraint.parse("no_evidence_rate>=0.95")], [QuerySet("answerable", "", [], "tuning")])

    argv = ["eval", "--queries", str(answerable_only), "--search", "thresholds", f"paths.state_dir={tmp_path}"]
    code = main([*argv, "guard=none"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "conf/search/thresholds.yaml bounds no_evidence_rate on each query set relative to the current" in err
    assert "the query sets answerable have no off-topic queries" in err and "--guard" in err
    code = main(["eval", "--queries", QUERIES, "--search", "thresholds", "--constraint", "hit@1@nope>=0.5"])
    assert code == 2 and "names set 'nope'" in capsys.readouterr().err


def test_the_printed_best_keeps_the_guard_and_infeasible_trials_are_marked(sample_cfg, mlflow_store, tmp_path, capsys):
    experiment = f"guard-{uuid.uuid4().hex[:8]}"
    code, out, _ = _search(
        capsys,
        sample_cfg,
        tmp_path,
        "--trials",
        "4",
        "--experiment",
        experiment,
        f"mlflow.tracking_uri={mlflow_store}",
        f"mlflow.artifact_location={tmp_path / 'artifacts'}",
    )
    assert code == 0
    rows = _trial_rows(out)
    low = [row for row in rows if row.endswith("retrieval.evidence_threshold=0.1")]
    high = [row for row in rows if row.endswith("retrieval.evidence_threshold=0.5")]
    assert low and high, out
    # Unconstrained, the low bar wins (answers every answerable query) and rejects no off-topic query.
    low_rate, high_rate = (float(rows[0].split()[1]) for rows in (low, high))
    assert low_rate > high_rate
    assert all("NO: no_evidence_rate>=0.95" in row for row in low) and all(" yes " in row for row in high)
    # The feasible best answers fewer queries than the current settings: nothing to deploy, no setting line.
    assert any(line.startswith("keep the current settings: ") for line in out.splitlines()), out
    assert not any(line.startswith("best setting") for line in out.splitlines())
    # The guard set is reported apart, for the best and the defaults.
    assert sum(line.split()[:2] == ["offtopic-sample", "guard"] for line in out.splitlines()) == 2

    client = MlflowClient(mlflow_store)
    found = client.get_experiment_by_name(experiment)
    (parent,) = [r for r in client.search_runs([found.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    assert "best.overrides" not in parent.data.tags and "is not better" in parent.data.tags["best.kept"]
    assert parent.data.metrics["tuning.best.set.offtopic-sample.no_evidence_rate"] == 1.0
    # optuna-dashboard's "Best Trial" is the storage's best completed trial: infeasible ones are stored pruned.
    (study,) = optuna.get_all_study_summaries(f"sqlite:///{tmp_path / STUDY_FILE}")
    loaded = optuna.load_study(study_name=study.study_name, storage=f"sqlite:///{tmp_path / STUDY_FILE}")
    shown = loaded._storage.get_best_trial(loaded._study_id)
    assert shown.params == {"retrieval.evidence_threshold": 0.5}
    assert {t.state for t in loaded.trials if t.params["retrieval.evidence_threshold"] == 0.1} == {
        optuna.trial.TrialState.PRUNED
    }
    artifact = Path(client.download_artifacts(parent.info.run_id, IMPORTANCES_ARTIFACT, str(tmp_path)))
    importances = json.loads(artifact.read_text())["importances"]
    assert set(importances) == {"retrieval.evidence_threshold"}


def test_no_feasible_trial_prints_no_best_and_keeps_the_current_settings_as_a_verdict(sample_cfg, tmp_path, capsys):
    code, out, err = _search(
        capsys, sample_cfg, tmp_path, "--trials", "2", "--constraint", "answer_rate>=0.99", "mlflow=off"
    )
    assert code == 0 and "error:" not in err  # "keep the current settings" is an answer, not a failure
    assert "no trial met the constraints" in out
    kept = "keep the current settings: no setting tried met the constraints under "
    (verdict,) = [line for line in out.splitlines() if line.startswith(kept)]
    assert "answer_rate>=0.99" in verdict.split(", "), verdict
    assert not any(line.startswith("best setting:") for line in out.splitlines())
    assert all(" NO: " in row for row in _trial_rows(out))


def test_a_best_that_breaks_a_guard_on_the_held_out_queries_is_not_recommended(sample_cfg, tmp_path, capsys):
    # Labels that no setting can satisfy: whatever wins on the tuning queries fails hit@1 on these.
    mislabelled = str(DATA / "heldout-mislabelled.jsonl")
    extra = ("--trials", "4", "--holdout", mislabelled, "--constraint", "hit@1>=0.5", "mlflow=off")
    code, out, _ = _search(capsys, sample_cfg, tmp_path, *extra)
    assert code == 0
    kept = "keep the current settings: the best setting tried (retrieval.evidence_threshold="
    assert any(line.startswith(kept) for line in out.splitlines()), out
    assert "breaks hit@1>=0.5 on heldout-mislabelled (held out)" in out
    assert not any(line.startswith("best setting") for line in out.splitlines())


def test_resume_continues_a_persisted_study(sample_cfg, tmp_path, capsys):
    code, out, _ = _search(capsys, sample_cfg, tmp_path, "--trials", "2", "--study", "s1", "mlflow=off")
    assert code == 0 and out.startswith("2 trials of search=guarded-space (study s1")
    code, _, err = _search(capsys, sample_cfg, tmp_path, "--trials", "1", "--study", "s1", "mlflow=off")
    assert code == 2 and "--resume continues it" in err  # an existing study is never silently extended

    code, out, _ = _search(capsys, sample_cfg, tmp_path, "--trials", "1", "--resume", "mlflow=off")
    assert code == 0 and out.startswith("3 trials of search=guarded-space (study s1")
    study = optuna.load_study(study_name="s1", storage=f"sqlite:///{tmp_path / STUDY_FILE}")
    constraints = study.user_attrs["constraints"]
    assert len(study.trials) == 3 and constraints[0] == "no_evidence_rate>=0.95"
    assert [c.split(">=")[0] for c in constraints[1:]] == ["no_evidence_rate@offtopic-sample"]  # the fitted guard


def test_a_sweep_ranks_feasible_combinations_first(sample_cfg, tmp_path, capsys):
    overrides = sample_overrides(
        sample_cfg, f"paths.state_dir={tmp_path}", "mlflow=off", LOW_UNCOVERED, "guard.sets=[]"
    )
    argv = ["eval", "--queries", QUERIES, "--guard", GUARD, "--no-baselines", "--rank-by", "answer_rate", "-m"]
    assert main([*argv, "retrieval.evidence_threshold=0.1,0.5", *overrides]) == 0
    out = capsys.readouterr().out
    ranking = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    # The current settings (0.35) are always evaluated; here they rank first, feasible.
    assert "retrieval.evidence_threshold=0.35" in ranking[0] and ranking[0].rstrip().endswith("yes  (current)")
    assert "retrieval.evidence_threshold=0.5" in ranking[1] and ranking[1].rstrip().endswith("yes")
    assert "retrieval.evidence_threshold=0.1" in ranking[2] and "NO: no_evidence_rate@offtopic-sample>=" in ranking[2]
    assert "keep the current settings: the current settings are the best setting tried" in out.splitlines()
    assert not any(line.startswith("best setting") for line in out.splitlines())

    assert main([*argv, "retrieval.evidence_threshold=0.1,0.05", *overrides]) == 0
    captured = capsys.readouterr()
    assert "retrieval.evidence_threshold=0.35" in captured.out and "keep the current settings" in captured.out


def test_a_resumed_study_draws_new_settings_not_the_first_ones_again(tmp_path):
    from pipelines.tuning.space import SearchSpace
    from pipelines.tuning.study import open_study, study_storage

    space = SearchSpace("s", "hit@1", "maximize", {"retrieval.top_k": {"low": 1, "high": 10_000}})
    storage = study_storage(str(tmp_path))

    def objective(trial):
        trial.set_user_attr("constraint_values", [0.0])
        return trial.suggest_int("retrieval.top_k", 1, 10_000)

    first = open_study(storage, space, "s1", resume=False, seed=0, constraints=[])
    first.optimize(objective, n_trials=3)
    resumed = open_study(storage, space, None, resume=True, seed=0, constraints=[])
    resumed.optimize(objective, n_trials=3)
    values = [t.params["retrieval.top_k"] for t in resumed.trials]
    assert len(values) == 6 and not set(values[:3]) & set(values[3:])


def test_a_search_scores_the_current_settings_once_and_keeps_them_when_nothing_beats_them(
    sample_cfg, mlflow_store, tmp_path, capsys
):
    space = tmp_path / "current-space.yaml"
    space.write_text(
        "metric: hit@1\nconstraints: [no_evidence_rate>=0.95]\n"
        "space:\n  retrieval.evidence_threshold: {choices: [0.35, 0.9]}\n"
    )
    experiment = f"current-{uuid.uuid4().hex[:8]}"
    overrides = sample_overrides(sample_cfg, f"paths.state_dir={tmp_path}", "guard.sets=[]")
    argv = ["eval", "--queries", QUERIES, "--guard", GUARD, "--search", str(space), "--trials", "5", "--seed", "0"]
    tracking = [f"mlflow.tracking_uri={mlflow_store}", f"mlflow.artifact_location={tmp_path / 'artifacts'}"]
    code = main([*argv, "--experiment", experiment, *tracking, *overrides])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.out.splitlines()
    # The defaults (0.35) are trial 0, marked as the current settings.
    (first,) = [line for line in _trial_rows(captured.out) if line.split()[0] == "0"]
    assert first.endswith("retrieval.evidence_threshold=0.35  (current)")
    assert any(line.startswith("keep the current settings: the current settings are the best") for line in lines)
    assert not any(line.startswith("best setting") for line in lines)
    # Five trials over two settings: each setting evaluated (one MLflow child run) once; a line per trial as it goes.
    assert "5 trials of search=current-space" in lines[0] and "2 distinct settings" in lines[0]
    progress = [line for line in captured.err.splitlines() if line.startswith("trial ")]
    assert len(progress) == 5 and sum("not re-run" in line for line in progress) == 3
    client = MlflowClient(mlflow_store)
    found = client.get_experiment_by_name(experiment)
    children = [r for r in client.search_runs([found.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.tags["search.overrides"] for r in children) == [
        "retrieval.evidence_threshold=0.35",
        "retrieval.evidence_threshold=0.9",
    ]


def test_a_missing_guard_set_is_one_line_and_exit_2(tmp_path, capsys):
    argv = ["eval", "--queries", QUERIES, "-m", "retrieval.top_k=5,10", f"paths.state_dir={tmp_path}", "mlflow=off"]
    assert main([*argv, "guard.sets=[nope.jsonl]"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "guard.sets: nope.jsonl not found in " in err and "guard=none" in err


def test_a_search_evaluates_no_setting_twice_on_the_same_sets(sample_cfg, tmp_path, capsys, monkeypatch):
    """The current settings are measured before the trials (for the guard and the bounds): trial 0 and
    the judging on the held-out queries take that evaluation instead of running it again."""
    import json as json_module

    from omegaconf import OmegaConf

    from pipelines.tuning import guards

    runs: list[tuple[str, str]] = []
    real = guards.evaluate

    def counted(cfg, queries, systems, label="", **kwargs):
        config = json_module.dumps(OmegaConf.to_container(cfg, resolve=True), sort_keys=True, default=str)
        runs.append((config, label))
        return real(cfg, queries, systems, label=label, **kwargs)

    monkeypatch.setattr(guards, "evaluate", counted)
    held_out = str(DATA / "heldout-mislabelled.jsonl")
    code, out, err = _search(capsys, sample_cfg, tmp_path, "--trials", "2", "--holdout", held_out, "mlflow=off")
    assert code == 0, err
    assert len(runs) == len(set(runs)), [label for _, label in runs]
    current = runs[0][0]
    assert [label for config, label in runs if config == current] == [f"{QUERIES}, {GUARD}", held_out]
