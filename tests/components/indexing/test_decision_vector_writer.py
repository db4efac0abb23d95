"""DecisionVectorWriter: the decision model's chunk vectors, kept in step with the plan, nothing without a model."""

import numpy as np
import pytest
from haystack import Document

from components.common.decision_scale import DecisionVectors
from components.contracts import IndexPlan
from components.indexing.decision_vector_pruner import DecisionVectorPruner
from components.indexing.decision_vector_writer import DecisionVectorWriter
from components.lookup.query_embedder import KnowledgeQueryEmbedder
from tests.components.refusals import assert_refused
from tests.helpers import MODEL, assert_round_trips


def _chunk(key: str, text: str) -> Document:
    return Document(content=text, meta={"evidence_key": key, "embed_header": "Disk full > Fix"})


def test_vectors_follow_the_plan_and_match_the_query_embedders_scale(tmp_path):
    path = tmp_path / "knowledge.decision-vectors.npz"
    writer, pruner = DecisionVectorWriter(model=MODEL, path=str(path)), DecisionVectorPruner(MODEL, str(path))
    first = [_chunk("a#0", "rm old logs"), _chunk("b#0", "grow the volume")]
    assert writer.run(documents=first, plan=IndexPlan(rebuild=True))["count"] == 2
    second, plan = [_chunk("c#0", "rotate logs")], IndexPlan(stale_ids=["a#0"])
    # While the collection changes, the file covers it before and after: a#0 leaves only once it is gone.
    assert writer.run(documents=second, plan=plan)["count"] == 3
    assert pruner.run(documents=second, plan=plan, written=1)["count"] == 2
    vectors = DecisionVectors.load(path, MODEL)
    assert vectors.ids == ("b#0", "c#0")
    assert np.linalg.norm(vectors.vectors, axis=1) == pytest.approx([1.0, 1.0], abs=1e-5)
    query = KnowledgeQueryEmbedder(model=MODEL).run(query="Disk full > Fix\nrotate logs")["query_embedding"]
    assert vectors.similarities(query, ["c#0"])[0] == pytest.approx(1.0, abs=1e-4)  # the embedded text as indexed
    assert writer.run(documents=first, plan=IndexPlan(rebuild=True))["count"] == 3
    assert pruner.run(documents=first, plan=IndexPlan(rebuild=True))["count"] == 2  # a rebuild keeps what it wrote
    assert set(DecisionVectors.load(path, MODEL).ids) == {"a#0", "b#0"}


def test_without_a_decision_model_nothing_is_written(tmp_path):
    path = tmp_path / "v.npz"
    assert DecisionVectorWriter(model=None, path=str(path)).run(documents=[], plan=IndexPlan())["count"] == 0
    assert not path.exists()


def test_round_trips_and_checks_its_arguments():
    assert_round_trips(DecisionVectorWriter(model=MODEL, path="/data/v.npz", batch_size=8, onnx_cache_dir="/tmp/c"))
    assert_round_trips(DecisionVectorWriter(model=None, path="/data/v.npz"))
    assert_round_trips(DecisionVectorPruner(model=MODEL, path="/data/v.npz"))
    assert DecisionVectorPruner(model=None, path="/data/v.npz").run(documents=[], plan=IndexPlan())["count"] == 0
    with pytest.raises(ValueError, match="batch_size"):
        DecisionVectorWriter(model=MODEL, path="/data/v.npz", batch_size=0)
    with pytest.raises(ValueError, match="model=' ' must be a non-empty string"):
        DecisionVectorWriter(model=" ", path="/data/v.npz")


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("model", "", "non-empty"),
    ("path", "", "non-empty"),
    ("backend", "tf", "one of torch, onnx, onnx_int8"),
    ("device", "", "non-empty"),
    ("batch_size", 0, "at least 1"),
    ("onnx_cache_dir", "", "non-empty"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(
        lambda **changed: DecisionVectorWriter(
            **{**{"model": "packaged:all-MiniLM-L6-v2", "path": "decision.npz"}, **changed}
        ),
        parameter,
        value,
        rule,
    )
