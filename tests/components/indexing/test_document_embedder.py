"""KnowledgeDocumentEmbedder: unit vectors of each chunk's header and content, as the benchmark reconstructs them."""

import numpy as np
import pytest
from haystack import Document
from sentence_transformers import SentenceTransformer

from components.common.embedding_models import ModelNotFoundError, resolve_model
from components.indexing.document_embedder import KnowledgeDocumentEmbedder
from tests.components.refusals import assert_refused
from tests.helpers import MODEL, assert_round_trips


@pytest.fixture(scope="module")
def embedder() -> KnowledgeDocumentEmbedder:
    embedder = KnowledgeDocumentEmbedder(model=MODEL)
    embedder.warm_up()
    return embedder


@pytest.fixture(scope="module")
def bare() -> SentenceTransformer:
    return SentenceTransformer(resolve_model(MODEL), device="cpu")


def test_each_chunk_gets_the_unit_vector_of_its_header_and_content(embedder, bare):
    chunks = [
        Document(content="Delete old logs.", meta={"embed_header": "Disk Full > Mitigation"}),
        Document(content="Check the standby.", meta={}),
    ]
    embedded = embedder.run(documents=chunks)["documents"]
    vectors = np.asarray([d.embedding for d in embedded])
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    expected = bare.encode(
        ["Disk Full > Mitigation\nDelete old logs.", "Check the standby."], normalize_embeddings=True
    )
    assert np.allclose(vectors, expected, atol=1e-5)


def test_embedding_text_is_what_the_embedder_encodes(embedder, bare):
    chunk = Document(content="Delete old logs.", meta={"embed_header": "Disk Full > Mitigation"})
    text = embedder.embedding_text(chunk)
    assert text == "Disk Full > Mitigation\nDelete old logs."
    vector = embedder.run(documents=[Document(content=chunk.content, meta=dict(chunk.meta))])["documents"][0].embedding
    assert np.allclose(vector, bare.encode(text, normalize_embeddings=True), atol=1e-5)
    assert embedder.embedding_text(Document(content="x", meta={"embed_header": ""})) == "\nx"  # empty, not None
    assert embedder.embedding_text(Document(content="x", meta={"embed_header": None})) == "x"


def test_no_meta_fields_embeds_the_content_alone(bare):
    embedder = KnowledgeDocumentEmbedder(model=MODEL, meta_fields_to_embed=[])
    chunk = Document(content="Delete old logs.", meta={"embed_header": "Disk Full"})
    vector = embedder.run(documents=[chunk])["documents"][0].embedding
    assert np.allclose(vector, bare.encode("Delete old logs.", normalize_embeddings=True), atol=1e-5)


def test_no_chunks_loads_no_model():
    embedder = KnowledgeDocumentEmbedder(model="packaged:not-installed")
    assert embedder.run(documents=[]) == {"documents": []}
    assert embedder._embedder is None


def test_an_unknown_packaged_model_fails_at_warm_up():
    with pytest.raises(ModelNotFoundError, match="unknown packaged model 'not-installed'"):
        KnowledgeDocumentEmbedder(model="packaged:not-installed").warm_up()


def test_warm_up_is_idempotent(embedder):
    loaded = embedder._embedder
    embedder.warm_up()
    assert embedder._embedder is loaded


def test_round_trips():
    assert_round_trips(KnowledgeDocumentEmbedder(model=MODEL, batch_size=8, meta_fields_to_embed=["title"]))
    assert KnowledgeDocumentEmbedder().meta_fields_to_embed == ["embed_header"]


def test_onnx_backend_embeds_the_same_text_to_the_same_vector_in_input_order(bare):
    embedder = KnowledgeDocumentEmbedder(model=MODEL, backend="onnx", batch_size=2)
    chunks = [
        Document(content="Check the standby.", meta={}),
        Document(content="Delete old logs. " * 30, meta={"embed_header": "Disk Full > Mitigation"}),
        Document(content="Restart the pod.", meta={"embed_header": "Pod > Fix"}),
    ]
    embedded = embedder.run(documents=chunks)["documents"]
    assert [d.content for d in embedded] == [c.content for c in chunks]
    vectors = np.asarray([d.embedding for d in embedded], dtype=np.float32)
    expected = bare.encode([embedder.embedding_text(c) for c in chunks], normalize_embeddings=True)
    assert (vectors * expected).sum(axis=1).min() >= 0.9999


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend='tf' must be one of torch, onnx, onnx_int8"):
        KnowledgeDocumentEmbedder(model=MODEL, backend="tf")


def test_onnx_round_trips():
    assert_round_trips(KnowledgeDocumentEmbedder(model=MODEL, backend="onnx", onnx_cache_dir="/tmp/cache"))


class TestKnowledgeDocumentEmbedderInit:
    @pytest.mark.parametrize("batch_size", [0, -3])
    def test_refuses_a_batch_size_under_one(self, batch_size):
        with pytest.raises(ValueError, match=f"^batch_size={batch_size} must be at least 1$"):
            KnowledgeDocumentEmbedder(model=MODEL, batch_size=batch_size)


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("model", "", "non-empty"),
    ("device", "", "non-empty"),
    ("batch_size", -3, "at least 1"),
    ("progress_bar", "yes", "true or false"),
    ("meta_fields_to_embed", "embed_header", "list of meta field names"),
    ("backend", "tf", "one of torch, onnx, onnx_int8"),
    ("onnx_cache_dir", "", "non-empty"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(lambda **changed: KnowledgeDocumentEmbedder(**{**{}, **changed}), parameter, value, rule)
