import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from components.common.embedding_models import resolve_model
from components.lookup.query_embedder import KnowledgeQueryEmbedder
from tests.helpers import MODEL, assert_round_trips


def test_one_unit_length_row_per_text_in_order():
    texts = ["disk almost full", "replica lag on the standby"]
    embeddings = KnowledgeQueryEmbedder(model=MODEL).run(texts=texts)["embeddings"]
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
    onnx = KnowledgeQueryEmbedder(model=MODEL, backend="onnx").run(texts=texts)["embeddings"]
    torch = KnowledgeQueryEmbedder(model=MODEL, backend="torch").run(texts=texts)["embeddings"]
    assert onnx.shape == (2, 384) and onnx.dtype == np.float32
    assert (onnx * torch).sum(axis=1).min() >= 0.9999


def test_onnx_round_trips():
    assert_round_trips(KnowledgeQueryEmbedder(model=MODEL, backend="onnx_int8"))
