import numpy as np
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


def test_warm_up_is_idempotent():
    embedder = KnowledgeQueryEmbedder(model=MODEL)
    embedder.warm_up()
    loaded = embedder._embedder
    embedder.warm_up()
    assert embedder._embedder is loaded


def test_round_trips():
    assert_round_trips(KnowledgeQueryEmbedder(model=MODEL, device="cpu"))
