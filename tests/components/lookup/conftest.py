"""A small L0 index on disk, written once per module, for the lookup components that read one."""

import pytest

from components.contracts import EntityRef
from components.stores.l0_index import L0Entry, L0Index
from components.stores.l0_index_file import load_l0_index, save_l0_index

ENTRIES = [
    L0Entry(
        "database/replication-lag.md",
        "PostgreSQL Replication Lag",
        "database",
        keywords=["replication lag", "wal"],
        entities=[EntityRef("PostgreSQL", ["postgres", "pg"])],
        headings=["PostgreSQL Replication Lag", "Diagnosis"],
        terms=["postgresql", "replication", "lag", "wal", "standby"],
    ),
    L0Entry(
        "disk/DiskAlmostFull.md",
        "Disk Almost Full",
        "disk",
        keywords=["disk space"],
        headings=["DiskAlmostFull", "Mitigation"],
        terms=["disk", "almost", "full", "space", "volume"],
    ),
]


@pytest.fixture(scope="module")
def l0_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("l0") / "kb.l0.json"
    term_df = {term: 1 for entry in ENTRIES for term in entry.terms}
    save_l0_index(L0Index(ENTRIES, term_df=term_df, domain_precision={"database": 1.0, "disk": 1.0}), path)
    return str(path)


@pytest.fixture(scope="module")
def l0_index(l0_path):
    """The index of `l0_path` as the lookup passes it from component to component."""
    return load_l0_index(l0_path)
