"""Every override form docs/configuration.md documents composes, dict-valued keys with plain overrides included."""

import pytest

from pipelines.config.settings import ConfigError, load_config


@pytest.mark.parametrize(
    ("override", "key", "expected"),
    [
        ("retrieval.top_k=30", "retrieval.top_k", 30),
        ("retrieval.reference_threshold=0.6", "retrieval.reference_threshold", 0.6),
        ("milvus.uri=/tmp/kb.db", "milvus.uri", "/tmp/kb.db"),
        ("mlflow.tracking_uri=null", "mlflow.tracking_uri", None),
        ("mlflow=off", "mlflow.tracking_uri", None),
        ("milvus.search_params={nprobe:16}", "milvus.search_params", {"nprobe": 16}),
        ("milvus.search_params.nprobe=16", "milvus.search_params", {"nprobe": 16}),
        ("+milvus.search_params.nprobe=16", "milvus.search_params", {"nprobe": 16}),
        ("milvus.index_params={nlist:128}", "milvus.index_params", {"nlist": 128}),
        ("rerank.weights.lexical_overlap=0.6", "rerank.weights.lexical_overlap", 0.6),
    ],
)
def test_documented_override_forms(tmp_path, override, key, expected):
    cfg = load_config([f"paths.state_dir={tmp_path}", override])
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, key)
    assert (OmegaConf.to_container(value) if OmegaConf.is_config(value) else value) == expected


def test_a_whole_dict_merges_into_the_default_weights(tmp_path):
    cfg = load_config([f"paths.state_dir={tmp_path}", "rerank.weights={lexical_overlap:0.6}"])
    assert cfg.rerank.weights.lexical_overlap == 0.6 and cfg.rerank.weights.similarity == 1.0


def test_group_override_to_postgres(tmp_path):
    cfg = load_config([f"paths.state_dir={tmp_path}", "trace=postgres"])
    assert cfg.trace.db_url.startswith("postgresql")


def test_search_params_reach_the_retriever(tmp_path):
    from pipelines.lookup import build_lookup_pipeline

    cfg = load_config([f"paths.state_dir={tmp_path}", "mlflow=off", "milvus.search_params={nprobe:16}"])
    retriever = build_lookup_pipeline(cfg, record=False).get_component("retriever")
    assert retriever.store.search_params == {"nprobe": 16}


def test_open_maps_still_refuse_unknown_weights_and_keys(tmp_path):
    with pytest.raises(ConfigError, match="rerank.weights.bogus"):
        load_config([f"paths.state_dir={tmp_path}", "rerank.weights.bogus=1"])
    with pytest.raises(ConfigError, match="search_paramz"):
        load_config([f"paths.state_dir={tmp_path}", "milvus.search_paramz={nprobe:16}"])
