"""The paired figures of `knowledge compare --a/--b`: sign test, bootstrap interval, override splitting."""

import numpy as np
import pytest

from pipelines.config.settings import ConfigError
from pipelines.tuning.ab import bootstrap_interval, paired_metric, sign_test, split_overrides


def test_the_sign_test_is_exact_and_ignores_ties():
    assert sign_test(np.zeros(12)) == 1.0
    assert sign_test(np.array([-1.0] * 8 + [0.0] * 5)) == pytest.approx(2 * 0.5**8)
    assert sign_test(np.array([1.0, -1.0] * 5)) == 1.0


def test_the_bootstrap_interval_brackets_the_mean_delta():
    deltas = np.array([0.0] * 30 + [-1.0] * 10)
    low, high = bootstrap_interval(deltas)
    assert low < deltas.mean() < high < 0
    assert bootstrap_interval(np.zeros(5)) == (0.0, 0.0)


def test_a_metric_pairs_only_queries_it_applies_to():
    paired = paired_metric([1.0, None, 0.0, 1.0], [0.0, None, 0.0, 1.0])
    assert paired["n"] == 3 and paired["delta"] == pytest.approx(-1 / 3, abs=1e-4)
    assert paired["b_worse"] == 1 and paired["b_better"] == 0


def test_overrides_split_like_a_shell():
    assert split_overrides("a.b=1 'c.d=x y'", "--a") == ["a.b=1", "c.d=x y"]
    assert split_overrides(None, "--a") == []
    with pytest.raises(ConfigError, match="--b: 'oops' is not key=value"):
        split_overrides("a=1 oops", "--b")


@pytest.mark.parametrize("wins,losses", [(0, 1), (3, 0), (5, 2), (9, 12), (20, 20), (1, 30)])
def test_the_sign_test_gives_scipys_exact_binomial_p(wins, losses):
    from scipy.stats import binomtest

    deltas = np.array([1.0] * wins + [-1.0] * losses + [0.0] * 3)
    assert sign_test(deltas) == pytest.approx(binomtest(wins, wins + losses, 0.5).pvalue, rel=1e-12)


def test_the_sign_test_runs_in_a_process_that_keeps_torch_out():
    """A lookup or serve process with an ONNX backend blocks torch; a verdict there still gets its p."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np; sys.modules['torch'] = None; "
        "from pipelines.tuning.recommend import sign_test; print(sign_test(np.array([1.0] * 6)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == pytest.approx(2 * 0.5**6)
