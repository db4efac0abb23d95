"""Embedding-model specs: the packaged model, pass-through names, and its tokenizer."""

from pathlib import Path

import pytest

from components.common.embedding_models import ModelNotFoundError, count_tokens, load_tokenizer, resolve_model
from tests.helpers import MODEL


def test_the_packaged_model_resolves_to_a_local_folder():
    folder = Path(resolve_model(MODEL))
    assert folder.is_dir() and (folder / "tokenizer.json").is_file()


def test_other_specs_pass_through_unchanged_and_a_missing_folder_is_a_clear_error(tmp_path):
    assert resolve_model("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
    assert resolve_model(str(tmp_path)) == str(tmp_path)
    with pytest.raises(ModelNotFoundError, match=r"embedder.model: no model folder at /no/such/model \(a sentence"):
        resolve_model("/no/such/model")


def test_an_unknown_packaged_model_is_a_clear_error():
    with pytest.raises(ModelNotFoundError, match="unknown packaged model 'nope'; packaged: all-MiniLM-L6-v2"):
        resolve_model("packaged:nope")


def test_the_tokenizer_is_loaded_once_per_spec_and_never_truncates():
    tokenizer = load_tokenizer(MODEL)
    assert load_tokenizer(MODEL) is tokenizer
    long_text = "disk " * 1000
    assert count_tokens(MODEL, long_text) == 1000  # beyond the model's 256/512 limits


def test_count_tokens_leaves_out_special_tokens():
    assert count_tokens(MODEL, "") == 0
    assert count_tokens(MODEL, "disk full") == 2
