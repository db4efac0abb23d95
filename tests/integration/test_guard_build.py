"""
`knowledge guard build` on the bundled knowledge/: it keeps no text whose service the knowledge base
mentions, and the default settings reject what it keeps (the guard fits the knowledge base).
"""

import re

import pytest

from tests.conftest import SAMPLE_KB

pytestmark = pytest.mark.integration


def _mentioned_anywhere(name: str, texts: list[str]) -> bool:
    pattern = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])", re.I)
    return any(pattern.search(text) for text in texts)


def test_the_built_guard_keeps_only_unmentioned_services_and_the_defaults_reject_it(sample_cfg):
    from components.stores.l0_index_file import load_l0_index
    from pipelines.evaluation.metrics import EvalQuery
    from pipelines.evaluation.run import PipelineSystem, evaluate
    from pipelines.tuning.guard_build import build_guard, read_catalogue

    catalogue = read_catalogue()
    assert len(catalogue) >= 150 and len({row["service"] for row in catalogue}) >= 30
    built = build_guard(load_l0_index(sample_cfg.l0.index_path).vocabulary, catalogue)
    texts = [path.read_text(encoding="utf-8") for path in SAMPLE_KB.rglob("*.md")]
    assert {"MySQL", "Redis", "Kafka"} <= set(built.dropped)  # knowledge/ has runbooks for them
    assert len(built.kept) >= 50
    for service in built.kept_services:
        assert not any(_mentioned_anywhere(name, texts) for name in service.split("/")), service

    queries = [EvalQuery(query=row["query"], relevant=set(), kind="off_topic", id=row["id"]) for row in built.kept]
    rejected = evaluate(sample_cfg, queries, [PipelineSystem(sample_cfg)]).report["systems"]["pipeline"]
    assert rejected["no_evidence_rate"] >= 0.95, rejected
