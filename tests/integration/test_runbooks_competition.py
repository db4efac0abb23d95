"""On the runbook corpus: a leader whose best block names another runbook is not presented as sure."""

import pytest

from pipelines.lookup import LookupService

pytestmark = pytest.mark.corpus
SPACE, FILES = "node/NodeFilesystemSpaceFillingUp.md", "node/NodeFilesystemFilesFillingUp.md"


@pytest.fixture(scope="module")
def service(runbooks_cfg):
    cfg, _ = runbooks_cfg
    return LookupService(cfg)


@pytest.mark.parametrize(
    "query",
    [
        "root filesystem predicted to run out of space in 4 h",  # the README's example
        # The inode runbook leads; its Meaning names the space runbook, ranked third here.
        "filesystem is predicted to run out of inodes within a day",
    ],
)
def test_the_runbook_the_leaders_meaning_names_competes_wherever_it_ranks(service, query):
    result = service.lookup(query)
    competition = result.to_dict()["competition"]
    assert competition["leader"] == FILES and competition["competitor"] == SPACE, competition
    assert result.completeness_hint.startswith(
        "ambiguous: NodeFilesystemFilesFillingUp vs NodeFilesystemSpaceFillingUp; both included;"
    )
    assert result.relevance_level != "high"
