"""
The lookup pipeline as a YAML file that `hayhooks pipeline deploy-yaml` deploys: what
`LookupService` builds, `Pipeline.dumps()`, plus the `inputs`/`outputs` hayhooks requires.

    python -m pipelines.serving.deploy_yaml lookup_knowledge.yml [key=value ...]
    HAYSTACK_DESERIALIZATION_ALLOWLIST=components,pipelines,milvus_haystack,haystack_integrations \
        hayhooks run --additional-python-path . &
    hayhooks pipeline deploy-yaml --name lookup_yaml lookup_knowledge.yml
"""

import sys

import yaml
from omegaconf import DictConfig

from pipelines.config.settings import ConfigError
from pipelines.lookup import ALLOWED_MODULES, build_lookup_pipeline
from pipelines.serialized import load_checked_config, refuse_config_secrets

# The variable the hayhooks process needs: it loads YAML without an allowlist of its own.
ALLOWLIST_ENV = {"HAYSTACK_DESERIALIZATION_ALLOWLIST": ",".join(ALLOWED_MODULES)}
IO = {
    "inputs": {"query": "query_transformer.query"},
    "outputs": {"result": "trace_writer.result"},
}


def deployable_yaml(cfg: DictConfig) -> str:
    """The recorded lookup pipeline of `cfg` with hayhooks' inputs (`query`) and outputs (`result`)."""
    refuse_config_secrets(cfg)
    return build_lookup_pipeline(cfg).dumps() + yaml.safe_dump(IO, sort_keys=False)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m pipelines.serving.deploy_yaml OUT.yml [key=value ...]", file=sys.stderr)
        return 2
    try:
        text = deployable_yaml(load_checked_config(argv[1:]))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with open(argv[0], "w", encoding="utf-8") as stream:
        stream.write(text)
    print(f"wrote {argv[0]}; deploy it with: {' '.join(f'{k}={v}' for k, v in ALLOWLIST_ENV.items())} hayhooks ...")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
