"""L0HintExtractor: structured hints from the L0 index, never evidence; its arguments checked at init."""

import pytest

from components.lookup.l0_hint_extractor import L0HintExtractor
from tests.helpers import assert_round_trips


def test_a_title_keyword_and_entity_match_give_structured_hints(l0_path):
    hints = L0HintExtractor(l0_path).run(query="PostgreSQL replication lag keeps growing")["hints"]
    assert hints.matched_titles == ["PostgreSQL Replication Lag"]
    assert "replication lag" in hints.matched_keywords
    assert hints.entities == ["PostgreSQL"]
    assert hints.domains == ["database"] and hints.single_domain == "database"
    assert hints.matched_sources == ["database/replication-lag.md"]


def test_a_query_naming_a_document_names_its_source(l0_path):
    hints = L0HintExtractor(l0_path).run(query="[FIRING:1] DiskAlmostFull on node-3")["hints"]
    assert hints.named_sources == ["disk/DiskAlmostFull.md"]


def test_a_query_about_nothing_indexed_gives_no_hints(l0_path):
    hints = L0HintExtractor(l0_path).run(query="how do I bake bread")["hints"]
    assert not hints.has_matches and hints.single_domain is None


def test_two_domains_give_no_single_domain(l0_path):
    hints = L0HintExtractor(l0_path).run(query="PostgreSQL replication lag and disk almost full")["hints"]
    assert set(hints.domains) == {"database", "disk"} and hints.single_domain is None


def test_round_trips(l0_path):
    assert_round_trips(L0HintExtractor(l0_path, title_min_overlap=0.7, domain_from_matches=False))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"title_min_overlap": 1.5}, r"title_min_overlap=1.5 must lie in \[0, 1\]"),
        ({"domain_min_precision": -0.1}, r"domain_min_precision=-0.1 must lie in \[0, 1\]"),
        ({"subject_elsewhere_margin": 2.0}, r"subject_elsewhere_margin=2.0 must lie in \[0, 1\]"),
        ({"passing_mention_df": -1}, "passing_mention_df=-1 must be at least 0"),
    ],
)
def test_init_refuses_values_out_of_range_by_name(l0_path, params, message):
    with pytest.raises(ValueError, match=message):
        L0HintExtractor(l0_index_path=l0_path, **params)
