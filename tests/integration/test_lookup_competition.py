"""
Competing documents and what `relevanceLevel` / `completenessHint` promise, on two sibling runbooks
whose titles differ in one word (space vs inodes; tests/sibling_kbs.py), indexed once per module.
"""

import json

import pytest

from components.tracing.trace_summary import compact_result
from pipelines.config.settings import load_config
from pipelines.indexing import run_indexing
from pipelines.lookup import LookupService
from pipelines.serving.views import agent_view
from tests.conftest import state_overrides
from tests.sibling_kbs import INODES_SOURCE, SPACE_SOURCE, write_sibling_kb

# Names the space runbook ("free space") but reads like both: the inodes one is close behind.
VAGUE_SPACE = "the root disk of worker-3 will be full in a few hours, free space is low"
NAMED_INODES = "NodeDiskInodesFillingUp: no free inodes left on the root disk of worker-3"
# Ranks the space runbook's Diagnosis, then its Mitigation, and names nothing to do.
IMAGES_AND_LOGS = "worker-3 root disk is full of old container images and big log files"


@pytest.fixture(scope="module")
def siblings(tmp_path_factory):
    root = tmp_path_factory.mktemp("siblings")
    kb = write_sibling_kb(root / "kb")
    overrides = state_overrides(root / "state", f"kb.path={kb}")
    run_indexing(load_config(overrides), rebuild=True)

    def service(*extra: str) -> LookupService:
        return LookupService(load_config([*overrides, *extra]))

    return service


@pytest.fixture(scope="module")
def default_service(siblings):
    return siblings()


def test_a_close_sibling_is_named_cited_and_packed(default_service):
    result = default_service.lookup(VAGUE_SPACE)
    assert result.evidence_blocks[0].source == SPACE_SOURCE
    assert result.relevance_level != "high"
    assert result.completeness_hint.startswith(
        "ambiguous: NodeDiskSpaceFillingUp vs NodeDiskInodesFillingUp; both included;"
    )
    view = agent_view(result.to_dict())
    assert INODES_SOURCE in {citation["source"] for citation in view["citations"]}
    assert f"source: {INODES_SOURCE}" in view["context"]
    # The full view and the trace record say how close the two are and why they compete.
    competition = result.to_dict()["competition"]
    assert competition["leader"] == SPACE_SOURCE and competition["competitor"] == INODES_SOURCE
    assert 0 <= competition["margin"] < 0.2
    assert competition["reasons"][0].startswith("score margin")
    assert "shared name stem NodeDisk…FillingUp" in competition["reasons"]
    assert result.retrieval_details(200)["competition"]["margin"] == competition["margin"]
    assert compact_result(result)["competition"] == competition  # the MLflow trace's assembler output


def test_the_competing_block_is_packed_when_the_budget_would_drop_it(siblings):
    # 180 tokens hold the leader's first block whole and too little after it for the competitor's
    # (a smaller block of a third runbook would be packed instead): the leader's block is cut so
    # that the competitor's fits.
    result = siblings("context.budget_tokens=180").lookup(VAGUE_SPACE)
    assert result.competition is not None
    assert result.context_pack.included_sources[:2] == [SPACE_SOURCE, INODES_SOURCE]
    assert result.context_pack.used_tokens <= 180
    assert "both included" in result.completeness_hint


def test_a_query_naming_one_sibling_is_not_marked(default_service):
    result = default_service.lookup(NAMED_INODES)
    assert result.evidence_blocks[0].source == INODES_SOURCE
    assert result.competition is None and "competition" not in result.to_dict()
    assert not result.completeness_hint.startswith("ambiguous")
    assert result.relevance_level == "high"


def test_complete_when_the_needed_section_is_packed(default_service):
    result = default_service.lookup(IMAGES_AND_LOGS)
    packed = [(b.source, b.breadcrumb) for b in result.context_pack.blocks]
    assert (SPACE_SOURCE, "NodeDiskSpaceFillingUp > Mitigation") in packed
    assert result.completeness_hint.startswith("complete:")


def test_the_leaders_mitigation_replaces_a_section_the_query_does_not_need(default_service):
    # The Meaning and the Impact of the space runbook rank first; the cap of two blocks per
    # document would leave its Mitigation out.
    result = default_service.lookup("worker-3 root disk filling up, little space left")
    blocks = [(b.source, b.breadcrumb.rsplit(" > ", 1)[-1]) for b in result.evidence_blocks]
    assert blocks[0] == (SPACE_SOURCE, "Meaning") and (SPACE_SOURCE, "Mitigation") in blocks
    assert (SPACE_SOURCE, "Impact") not in blocks
    assert result.completeness_hint.startswith("complete:")


def test_a_mitigation_outside_the_budget_is_named_in_the_hint(siblings):
    result = siblings("context.budget_tokens=120").lookup(IMAGES_AND_LOGS)
    mitigation = (SPACE_SOURCE, "NodeDiskSpaceFillingUp > Mitigation")
    assert mitigation in [(b.source, b.breadcrumb) for b in result.evidence_blocks]
    assert mitigation not in [(b.source, b.breadcrumb) for b in result.context_pack.blocks]
    assert result.completeness_hint.startswith("partial:")
    assert "not in the context: Mitigation of NodeDiskSpaceFillingUp" in result.completeness_hint


def test_knowledge_eval_prints_the_reliability_table_of_its_lookups(siblings, tmp_path, capsys):
    """The table `knowledge eval` prints equals a count by hand of the same lookups' levels."""
    from pipelines.cli.entry_point import main

    rows = [
        {"query": VAGUE_SPACE, "relevant": [SPACE_SOURCE]},
        {"query": NAMED_INODES, "relevant": [INODES_SOURCE]},
        {"query": IMAGES_AND_LOGS, "relevant": [SPACE_SOURCE]},
        {"query": "the root disk of worker-3 will be full in a few hours", "relevant": [SPACE_SOURCE]},
        {"query": "how do I bake sourdough bread", "relevant": []},
    ]
    queries = tmp_path / "siblings.jsonl"
    queries.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    service = siblings()
    counts: dict[str, list[int]] = {}
    for row in rows[:4]:
        result = service.lookup(row["query"])
        right = int(result.found and result.evidence_blocks[0].source in row["relevant"])
        for name in (result.relevance_level, "ambiguous" if result.competition else None):
            if name:
                counts.setdefault(name, [0, 0])
                counts[name][0] += 1
                counts[name][1] += right
    cfg = service.cfg
    code = main(
        [
            "eval",
            "--queries",
            str(queries),
            "--no-baselines",
            f"paths.state_dir={cfg.paths.state_dir}",
            f"kb.path={cfg.kb.path}",
            "mlflow=off",
        ]
    )
    assert code == 0
    printed = {
        line.split()[0]: line.split()[1:]
        for line in capsys.readouterr().out.splitlines()
        if line.split()[:1] and line.split()[0] in ("high", "medium", "low", "none", "ambiguous")
    }
    for name in ("high", "medium", "low", "none", "ambiguous"):
        count, right = counts.get(name, [0, 0])
        hit = "-" if not count else f"{right / count:.3f}"
        assert printed[name] == [str(count), f"{count / 4:.3f}", hit], name
