"""DecisionVectorPruner: the init parameters it refuses."""

import pytest

from components.indexing.decision_vector_pruner import DecisionVectorPruner
from tests.components.refusals import assert_refused

# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("model", " ", "non-empty"),
    ("path", "", "non-empty"),
    ("path", None, "non-empty"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(
        lambda **changed: DecisionVectorPruner(
            **{**{"model": "packaged:all-MiniLM-L6-v2", "path": "decision.npz"}, **changed}
        ),
        parameter,
        value,
        rule,
    )
