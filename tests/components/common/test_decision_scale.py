"""The decision scale: decision vectors kept by chunk id, candidates rescored on the decision model's scale."""

import os

import numpy as np
import pytest

from components.common.decision_scale import (
    DecisionVectors,
    DecisionVectorsError,
    DecisionVectorsFile,
    on_decision_scale,
    ranking_similarity,
)
from tests.helpers import candidate

MODEL = "packaged:m"


def _unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def _vectors() -> DecisionVectors:
    return DecisionVectors(MODEL, ("a#0", "b#0"), np.stack([_unit(1, 0, 0), _unit(0, 1, 0)]))


def test_candidates_get_the_decision_similarity_and_keep_the_ranking_one():
    found = [candidate("a#0", "a.md", 0.9), candidate("b#0", "b.md", 0.8)]
    query = _unit(0.6, 0.8, 0.0)
    rescored = on_decision_scale(found, query, _vectors())
    assert [c.similarity for c in rescored] == pytest.approx([0.6, 0.8])
    assert [c.rank_similarity for c in rescored] == [0.9, 0.8]
    assert [ranking_similarity(c) for c in rescored] == [0.9, 0.8]
    assert found[0].similarity == 0.9 and found[0].rank_similarity is None  # new objects: the input stays
    again = on_decision_scale(rescored, query, _vectors())
    assert [c.rank_similarity for c in again] == [0.9, 0.8]  # rescoring twice keeps the ranking model's


def test_a_negative_cosine_is_clamped_like_the_pipelines_similarity():
    rescored = on_decision_scale([candidate("a#0", "a.md", 0.5)], _unit(-1, 0, 0), _vectors())
    assert rescored[0].similarity == 0.0
    assert _vectors().best(_unit(0, 0, 1)) == 0.0 and _vectors().best(_unit(1, 1, 0)) == pytest.approx(0.7071, 1e-3)


def test_a_chunk_without_a_decision_vector_names_the_rebuild():
    with pytest.raises(DecisionVectorsError, match=r"knowledge index --rebuild"):
        on_decision_scale([candidate("c#0", "c.md", 0.5)], _unit(1, 0, 0), _vectors())


def test_updates_remove_replace_and_add_rows_by_id():
    vectors = _vectors().updated(["a#0"], ["b#0", "c#0"], np.stack([_unit(0, 0, 1), _unit(1, 1, 0)]))
    assert vectors.ids == ("b#0", "c#0")
    assert vectors.similarities(_unit(0, 0, 1), ["b#0"]) == pytest.approx([1.0])
    assert DecisionVectors.empty(MODEL).updated([], ["x#0"], np.stack([_unit(1, 0, 0)])).ids == ("x#0",)
    assert _vectors().updated(["a#0"], [], np.zeros((0, 3))).ids == ("b#0",)


def test_the_file_round_trips_and_refuses_another_model_or_none(tmp_path):
    path = _vectors().save(tmp_path / "knowledge.decision-vectors.npz")
    loaded = DecisionVectors.load(path, MODEL)
    assert loaded.ids == ("a#0", "b#0") and loaded.vectors.dtype == np.float32
    with pytest.raises(DecisionVectorsError, match=r"not of the decision model other.*--rebuild"):
        DecisionVectors.load(path, "other")
    with pytest.raises(DecisionVectorsError, match=r"no decision vectors.*--rebuild"):
        DecisionVectors.load(tmp_path / "missing.npz", MODEL)


def test_the_file_handle_follows_a_rewrite(tmp_path):
    path = tmp_path / "v.npz"
    _vectors().save(path)
    handle = DecisionVectorsFile(path, MODEL)
    assert handle.get().ids == ("a#0", "b#0")
    _vectors().updated(["a#0"], [], np.zeros((0, 3))).save(path)
    os.utime(path, ns=(1, 1))  # a new modification time, whatever the clock's resolution
    assert handle.get().ids == ("b#0",)
