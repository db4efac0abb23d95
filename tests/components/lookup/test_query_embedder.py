import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from components.common.embedding_models import resolve_model
from components.lookup.query_embedder import KnowledgeQueryEmbedder
from tests.components.refusals import assert_refused
from tests.helpers import MODEL, assert_round_trips


def test_the_query_and_its_expansion_each_get_their_named_embedding():
    embedder = KnowledgeQueryEmbedder(model=MODEL)
    out = embedder.run(query="pg lag", expanded_query="pg lag (PostgreSQL)")
    rows = embedder.embed(["pg lag", "pg lag (PostgreSQL)"])
    assert np.array_equal(out["query_embedding"], rows[0])
    assert np.array_equal(out["expanded_query_embedding"], rows[1])
    plain = embedder.run(query="pg lag")
    assert np.array_equal(plain["expanded_query_embedding"], plain["query_embedding"])


def test_one_unit_length_row_per_text_in_order():
    texts = ["disk almost full", "replica lag on the standby"]
    embeddings = KnowledgeQueryEmbedder(model=MODEL).embed(texts)
    assert embeddings.shape == (2, 384) and embeddings.dtype == np.float32
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
    bare = SentenceTransformer(resolve_model(MODEL), device="cpu").encode(texts, normalize_embeddings=True)
    assert np.allclose(embeddings, bare, atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_warm_up_is_idempotent(backend):
    embedder = KnowledgeQueryEmbedder(model=MODEL, backend=backend)
    embedder.warm_up()
    loaded = embedder._embed
    embedder.warm_up()
    assert embedder._embed is loaded


def test_round_trips():
    assert_round_trips(KnowledgeQueryEmbedder(model=MODEL, device="cpu"))


def test_onnx_backend_gives_the_torch_backend_vectors():
    texts = ["disk almost full", "replica lag on the standby"]
    onnx = KnowledgeQueryEmbedder(model=MODEL, backend="onnx").embed(texts)
    torch = KnowledgeQueryEmbedder(model=MODEL, backend="torch").embed(texts)
    assert onnx.shape == (2, 384) and onnx.dtype == np.float32
    assert (onnx * torch).sum(axis=1).min() >= 0.9999


def test_onnx_round_trips():
    assert_round_trips(KnowledgeQueryEmbedder(model=MODEL, backend="onnx_int8"))


def test_a_decision_model_gives_the_decision_embeddings_too():
    both = KnowledgeQueryEmbedder(model=MODEL, decision_model=MODEL).run(
        query="disk full", expanded_query="disk full x"
    )
    assert both["decision_query_embedding"].shape == (384,)
    assert np.allclose(both["decision_query_embedding"], both["query_embedding"])  # the same model: the same vector
    assert not np.allclose(both["expanded_decision_query_embedding"], both["decision_query_embedding"])
    alone = KnowledgeQueryEmbedder(model=MODEL).run(query="disk full")
    assert alone["decision_query_embedding"] is None and alone["expanded_decision_query_embedding"] is None
    assert_round_trips(KnowledgeQueryEmbedder(model=MODEL, decision_model=MODEL))


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("model", "", "non-empty"),
    ("device", "", "non-empty"),
    ("backend", "tf", "one of torch, onnx, onnx_int8"),
    ("onnx_cache_dir", "", "non-empty"),
    ("decision_model", " ", "non-empty"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(lambda **changed: KnowledgeQueryEmbedder(**{**{}, **changed}), parameter, value, rule)
