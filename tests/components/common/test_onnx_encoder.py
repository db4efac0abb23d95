"""The ONNX Runtime encoder against sentence-transformers on the same model folder, and its export cache."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from components.common.embedding_models import load_onnx_encoder, resolve_model
from components.common.onnx_encoder import TOKENS_PER_RUN, OnnxSentenceEncoder
from components.common.onnx_export import MODEL_FILE, OnnxExportError, ensure_exported, export_dir, is_exported
from components.errors import BadInputError
from components.indexing.markdown_reader import MarkdownKnowledgeReader
from tests.conftest import EVAL_DIR, SAMPLE_KB
from tests.helpers import MODEL

# Every eval query file, a few queries of each, and sample chunk-sized texts: short and long inputs.
SAMPLE_PER_FILE = 6


def sample_texts() -> list[str]:
    texts = []
    for path in sorted(EVAL_DIR.glob("*.jsonl")):
        lines = [json.loads(line)["query"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        texts += lines[:SAMPLE_PER_FILE]
    documents = MarkdownKnowledgeReader(kb_path=str(SAMPLE_KB)).run()["documents"][:4]
    texts += [document.content for document in documents]  # longer than max_seq_length: truncated alike
    return texts


@pytest.fixture(scope="module")
def torch_model():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve_model(MODEL), device="cpu")


def test_onnx_vectors_match_sentence_transformers(torch_model):
    texts = sample_texts()
    onnx = load_onnx_encoder(MODEL, "onnx").encode(texts, batch_size=8)
    bare = torch_model.encode(texts, normalize_embeddings=True, batch_size=8)
    assert onnx.shape == bare.shape == (len(texts), 384) and onnx.dtype == np.float32
    cosines = (onnx * bare).sum(axis=1)
    assert cosines.min() >= 0.9999, texts[int(cosines.argmin())]


def test_a_text_gets_the_same_vector_alone_or_padded_in_a_batch():
    encoder = load_onnx_encoder(MODEL, "onnx")
    texts = ["disk full", "postgres standby is falling behind the primary after a long vacuum run"]
    together = encoder.encode(texts)
    alone = np.vstack([encoder.encode([text]) for text in texts])
    assert np.allclose(together, alone, atol=1e-5)


def test_idle_intra_op_threads_sleep_rather_than_spin():
    """Spinning threads take the cores that concurrent requests need (docs/embedding-backends.md)."""
    options = OnnxSentenceEncoder(ensure_exported(resolve_model(MODEL))).session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


class RecordingSession:
    """The encoder's real ONNX Runtime session, recording the input shape of each call."""

    def __init__(self, session) -> None:
        self.session = session
        self.shapes: list[tuple[int, int]] = []

    def run(self, outputs, feed):
        self.shapes.append(feed["input_ids"].shape)
        return self.session.run(outputs, feed)


def test_a_batch_of_long_texts_runs_in_calls_of_a_few_hundred_tokens():
    encoder = OnnxSentenceEncoder(ensure_exported(resolve_model(MODEL)))
    texts = sample_texts()
    whole = encoder.encode(texts, batch_size=32)
    encoder.session = RecordingSession(encoder.session)
    again = encoder.encode(texts, batch_size=32)
    assert len(encoder.session.shapes) > 1
    assert all(rows * length <= TOKENS_PER_RUN or rows == 1 for rows, length in encoder.session.shapes)
    assert np.allclose(whole, again, atol=1e-6)


def test_the_export_traces_plain_attention():
    import onnx

    graph = onnx.load(str(ensure_exported(resolve_model(MODEL)) / MODEL_FILE)).graph
    # The SDPA trace masks every score tensor again with IsNaN/Where; eager attention does not.
    assert "IsNaN" not in {node.op_type for node in graph.node}


def test_int8_variant_is_close_but_its_own_export():
    float32 = load_onnx_encoder(MODEL, "onnx")
    int8 = load_onnx_encoder(MODEL, "onnx_int8")
    texts = sample_texts()[:12]
    cosines = (float32.encode(texts) * int8.encode(texts)).sum(axis=1)
    assert cosines.min() > 0.95
    assert cosines.min() < 0.9999  # quantized weights: not the same vectors (why it is a vector space of its own)


def _linked_copy(source: Path, target: Path) -> Path:
    """A model folder whose files link to the packaged model's (no 90 MB copy)."""
    for path in source.rglob("*"):
        if path.is_file():
            link = target / path.relative_to(source)
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(path, link)
    return target


def test_export_cache_is_keyed_by_model_content(tmp_path):
    packaged = Path(resolve_model(MODEL))
    copy = _linked_copy(packaged, tmp_path / "my-model")
    folder = ensure_exported(str(packaged))
    assert export_dir(copy) == folder  # the same content: the same export, wherever the folder is
    pooling = copy / "1_Pooling" / "config.json"
    settings = json.loads(pooling.read_text(encoding="utf-8"))
    pooling.unlink()
    pooling.write_text(json.dumps({**settings, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}))
    assert export_dir(copy) != folder  # changed in place: a new export


def test_cache_folder_setting_is_used(tmp_path):
    assert export_dir(resolve_model(MODEL), tmp_path / "cache").parent == tmp_path / "cache"


def test_a_model_name_without_a_local_folder_is_refused_clearly():
    with pytest.raises(BadInputError, match="needs a local model folder"):
        load_onnx_encoder("sentence-transformers/all-MiniLM-L6-v2", "onnx")


def test_a_folder_that_is_no_model_fails_with_the_reason(tmp_path):
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "not-a-model" / "README.md").write_text("nothing here")
    with pytest.raises(OnnxExportError, match="cannot export"):
        ensure_exported(str(tmp_path / "not-a-model"), tmp_path / "cache")


def test_a_cache_entry_that_does_not_load_is_exported_again(tmp_path):
    import shutil

    model = resolve_model(MODEL)
    cache = tmp_path / "cache"
    entry = export_dir(model, cache)
    shutil.copytree(ensure_exported(model), entry)  # the shared cache's export, then damaged here only
    (entry / MODEL_FILE).write_bytes(b"not an onnx graph" * 100)
    encoder = OnnxSentenceEncoder.load(model, str(cache))
    assert encoder.encode(["disk full"]).shape == (1, 384)
    size = (entry / MODEL_FILE).stat().st_size
    assert size > 1_000_000  # exported again, in place
    assert [p.name for p in cache.iterdir() if p.name.startswith(".damaged")] == []

    with (entry / MODEL_FILE).open("r+b") as graph:  # cut, as a full disk would leave it
        graph.truncate(size // 2)
    assert not is_exported(entry)  # the sizes the export recorded catch it before ONNX Runtime sees it
    assert ensure_exported(model, cache) == entry and (entry / MODEL_FILE).stat().st_size == size


def test_an_unwritable_cache_names_the_setting_and_the_torch_backend(tmp_path):
    import shutil
    import subprocess

    from tests.helpers import child_env
    from tests.integration.test_damaged_state import read_only_mount_command

    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is needed for a read-only mount")
    cache = tmp_path / "cache"
    cache.mkdir()
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "disk.md").write_text("# Disk full\n\nRotate the old logs.\n", encoding="utf-8")
    args = ["index", "--kb", str(kb), f"paths.state_dir={tmp_path / 'state'}", "mlflow=off"]
    args += ["embedder.backend=onnx", f"embedder.onnx_cache_dir={cache}"]
    done = subprocess.run(read_only_mount_command(cache, *args), capture_output=True, text=True, env=child_env())
    if "unshare" in done.stderr and done.returncode != 2:
        pytest.skip(f"no mount namespace here: {done.stderr.strip()[:200]}")
    assert done.returncode == 2, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.strip()]
    assert f"the ONNX cache {cache} is not writable" in line
    assert "embedder.onnx_cache_dir" in line and "embedder.backend=torch" in line
