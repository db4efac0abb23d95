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
