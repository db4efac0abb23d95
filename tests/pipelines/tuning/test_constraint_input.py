"""A bad --constraint exits 2 before any trial, naming the constraint and what is allowed."""

import pytest

from pipelines.cli import main
from pipelines.config.settings import ConfigError
from pipelines.tuning.guards import Constraint
from pipelines.tuning.ranking import RANKABLE
from tests.conftest import EVAL_DIR
from tests.helpers import run_cli, stderr_lines

QUERIES = str(EVAL_DIR / "sample-kb.jsonl")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("nosuch_metric>=0.5", "unknown metric 'nosuch_metric'; the metrics are " + ", ".join(RANKABLE)),
        ("hit@1>=nan", "bound 'nan' is not a finite number"),
        ("hit@1>=inf", "bound 'inf' is not a finite number"),
        ("hit@1>=1.5", "bound 1.5 is outside [0, 1], the range of hit@1"),
        ("no_evidence_rate>=-1", "bound -1 is outside [0, 1], the range of no_evidence_rate"),
        ("latency_p95_ms<=-5", "bound -5 is negative: latency_p95_ms is a latency in ms"),
    ],
)
def test_a_bad_constraint_names_itself_and_what_is_allowed(text, reason):
    with pytest.raises(ConfigError) as caught:
        Constraint.parse(text)
    assert str(caught.value) == f"--constraint: {text!r}: {reason}"
    assert "--rank-by" not in str(caught.value)


def test_a_latency_bound_above_one_is_a_fine_constraint():
    assert Constraint.parse("latency_p95_ms<=250").bound == 250


@pytest.mark.parametrize("mode", [["-m", "retrieval.top_k=5,10"], ["--search", "thresholds"]])
def test_the_cli_exits_2_before_any_trial(mode, tmp_path):
    state = tmp_path / "state"  # nothing indexed: any trial would fail on that, not on the constraint
    result = run_cli("eval", "--queries", QUERIES, "--constraint", "hit@1>=1.5", *mode, f"paths.state_dir={state}")
    assert result.returncode == 2, result.stderr
    [line] = stderr_lines(result)
    assert "'hit@1>=1.5': bound 1.5 is outside [0, 1]" in line
    assert not (state / "optuna.db").exists()


def test_main_refuses_nan_in_process(capsys):
    assert main(["eval", "--queries", QUERIES, "-m", "retrieval.top_k=5,10", "--constraint", "hit@1>=nan"]) == 2
    assert "not a finite number" in capsys.readouterr().err
