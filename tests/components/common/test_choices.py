"""The rerank default weights: the component's defaults and conf/rerank/default.yaml stay equal."""

from omegaconf import OmegaConf

from components.common.choices import DEFAULT_RERANK_WEIGHTS
from pipelines.config.settings import CONF_DIR, load_config


def test_conf_rerank_default_equals_the_component_defaults_in_order():
    weights = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "rerank" / "default.yaml").weights)
    assert list(weights.items()) == list(DEFAULT_RERANK_WEIGHTS.items())


def test_composed_config_uses_the_component_defaults():
    assert dict(load_config(["mlflow=off"]).rerank.weights) == DEFAULT_RERANK_WEIGHTS
