"""
L0HintExtractor, one test per rule (in the style of haystack's test_document_joiner.py): titles,
keywords, entities, document names, domains and their rules, uncovered terms; init validation,
serialization and empty input. Hints only: nothing here is evidence.
"""

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from components.common.embedding_models import DEFAULT_MODEL, load_tokenizer
from components.common.text import terms
from components.contracts import EntityRef
from components.lookup.l0_hint_extractor import L0HintExtractor, common_words
from components.stores.l0_index import L0Entry, L0Index
from tests.components.refusals import assert_refused
from tests.helpers import assert_round_trips

TYPE = "components.lookup.l0_hint_extractor.L0HintExtractor"


def entry(source: str, title: str, category: str, body: str, **fields) -> L0Entry:
    headings = fields.pop("headings", [title])
    return L0Entry(source, title, category, headings=headings, terms=sorted(set(terms(f"{title} {body}"))), **fields)


ENTRIES = [
    entry(
        "database/replication-lag.md",
        "PostgreSQL Replication Lag",
        "database",
        "the standby falls behind the primary wal",
        keywords=["replication lag", "write ahead log"],
        entities=[EntityRef("PostgreSQL", ["postgres", "pg"])],
    ),
    entry(
        "disk/DiskAlmostFull.md",
        "Disk Almost Full",
        "disk",
        "free space on the volume; a vexolith cache may grow",
        keywords=["disk space"],
        headings=["DiskAlmostFull", "Mitigation"],
    ),
    entry(
        "alertmanager/AlertmanagerClusterDown.md",
        "Alertmanager Cluster Down",
        "alertmanager",
        "the cluster of alertmanager peers is down",
    ),
    entry(
        "operator/ControllerReconcileErrors.md",
        "Controller Reconcile Errors",
        "operator",
        "the controller fails to reconcile the alertmanager resources",
    ),
    entry("prometheus/PrometheusRuleFailures.md", "Prometheus Rule Failures", "prometheus", "rule evaluation fails"),
]
# "prometheus" is named by most documents of a Prometheus knowledge base: it says little alone.
PRECISION = {"database": 1.0, "disk": 1.0, "alertmanager": 1.0, "operator": 1.0, "prometheus": 0.3}


@pytest.fixture(scope="module")
def kb():
    term_df: dict[str, int] = {}
    for item in ENTRIES:
        for term in item.terms:
            term_df[term] = term_df.get(term, 0) + 1
    return L0Index(ENTRIES, term_df=term_df, domain_precision=PRECISION)


def hints(kb: L0Index, query: str, **params):
    return L0HintExtractor(**params).run(query=query, l0_index=kb)["hints"]


class TestL0HintExtractor:
    def test_init_defaults(self):
        extractor = L0HintExtractor()
        assert extractor.title_min_overlap == 0.6 and extractor.domain_from_matches is True
        assert extractor.domain_min_precision == 0.5 and extractor.subject_elsewhere_margin == 0.15
        assert extractor.passing_mention_df == 1 and extractor.tokenizer_model == DEFAULT_MODEL

    @pytest.mark.parametrize(
        ("params", "message"),
        [
            ({"title_min_overlap": 1.5}, r"title_min_overlap=1.5 must lie in \[0, 1\]"),
            ({"domain_min_precision": -0.1}, r"domain_min_precision=-0.1 must lie in \[0, 1\]"),
            ({"subject_elsewhere_margin": 2.0}, r"subject_elsewhere_margin=2.0 must lie in \[0, 1\]"),
            ({"passing_mention_df": -1}, "passing_mention_df=-1 must be at least 0"),
        ],
    )
    def test_init_refuses_values_out_of_range_by_name(self, params, message):
        with pytest.raises(ValueError, match=message):
            L0HintExtractor(**params)

    def test_to_dict(self):
        data = component_to_dict(L0HintExtractor(tokenizer_model=None), "l0_hints")
        assert data == {
            "type": TYPE,
            "init_parameters": {
                "title_min_overlap": 0.6,
                "domain_from_matches": True,
                "domain_min_precision": 0.5,
                "tokenizer_model": None,
                "subject_elsewhere_margin": 0.15,
                "passing_mention_df": 1,
            },
        }

    def test_from_dict(self):
        data = {"type": TYPE, "init_parameters": {"title_min_overlap": 0.8}}
        extractor = component_from_dict(L0HintExtractor, data, "l0_hints")
        assert extractor.title_min_overlap == 0.8

    def test_round_trips(self):
        assert_round_trips(L0HintExtractor(title_min_overlap=0.7, domain_from_matches=False))

    def test_an_empty_query_gives_no_hints(self, kb):
        found = hints(kb, "")
        assert not found.has_matches and found.domains == [] and found.uncovered_terms == []

    def test_a_query_about_nothing_indexed_gives_no_hints(self, kb):
        found = hints(kb, "how do I bake bread")
        assert not found.has_matches and found.single_domain is None

    def test_a_title_matches_when_enough_of_its_words_weighted_by_idf_occur(self, kb):
        query = "disk almost empty"  # two of the title's three words, equally rare
        assert hints(kb, query, title_min_overlap=0.6).matched_titles == ["Disk Almost Full"]
        assert hints(kb, query, title_min_overlap=0.7).matched_titles == []

    def test_a_title_naming_its_category_matches_only_when_the_query_names_it(self, kb):
        assert hints(kb, "cluster went down").matched_titles == []
        assert hints(kb, "alertmanager cluster down").matched_titles == ["Alertmanager Cluster Down"]

    def test_a_keyword_matches_as_a_phrase(self, kb):
        found = hints(kb, "replication lag keeps growing")
        assert found.matched_keywords == ["replication lag"]
        assert found.matched_sources == ["database/replication-lag.md"]

    def test_a_keyword_of_several_words_matches_with_all_its_words_in_any_order(self, kb):
        assert hints(kb, "log write ahead is big").matched_keywords == ["write ahead log"]
        assert hints(kb, "the write log is big").matched_keywords == []

    def test_an_alias_gives_its_entity(self, kb):
        found = hints(kb, "pg is slow")
        assert found.entities == ["PostgreSQL"] and found.matched_sources == ["database/replication-lag.md"]

    def test_a_quoted_document_name_names_its_source(self, kb):
        found = hints(kb, "[FIRING:1] DiskAlmostFull on node-3")
        assert found.named_sources == ["disk/DiskAlmostFull.md"]
        assert found.matched_titles == ["Disk Almost Full"]

    def test_a_category_the_query_names_is_a_domain(self, kb):
        found = hints(kb, "the disk is slow", domain_from_matches=False)
        assert found.domains == ["disk"] and found.single_domain == "disk"

    def test_the_categories_of_matched_documents_are_domains_unless_turned_off(self, kb):
        assert hints(kb, "pg is slow").domains == ["database"]
        assert hints(kb, "pg is slow", domain_from_matches=False).domains == []

    def test_a_category_most_documents_name_is_no_domain_alone(self, kb):
        assert hints(kb, "prometheus restarts", domain_from_matches=False).domains == []
        lenient = hints(kb, "prometheus restarts", domain_from_matches=False, domain_min_precision=0.2)
        assert lenient.domains == ["prometheus"]

    def test_two_domains_give_no_single_domain(self, kb):
        found = hints(kb, "pg replication lag and disk almost full")
        assert set(found.domains) == {"database", "disk"} and found.single_domain is None

    def test_a_category_named_as_the_subject_of_another_document_is_no_domain(self, kb):
        query = "controller alertmanager fails to reconcile"
        found = hints(kb, query)
        assert "alertmanager" not in found.domains
        assert found.domain_rules == [
            "named_as_subject_elsewhere: alertmanager (operator/ControllerReconcileErrors.md)"
        ]
        off = hints(kb, query, subject_elsewhere_margin=1.0)
        assert "alertmanager" in off.domains and off.domain_rules == []

    def test_a_word_no_document_uses_and_no_common_word_is_uncovered(self, kb):
        assert hints(kb, "zorblax crashed").uncovered_terms == ["zorblax"]

    def test_the_common_words_are_the_vocabulary_words_with_their_terms(self):
        vocabulary = load_tokenizer(DEFAULT_MODEL).get_vocab()
        words = {token.lower() for token in vocabulary if token.isascii() and token.isalpha()}
        by_terms = words.union(*(terms(word) for word in words))
        assert by_terms > words and common_words(DEFAULT_MODEL) == by_terms

    def test_without_a_tokenizer_nothing_is_uncovered(self, kb):
        assert hints(kb, "zorblax crashed", tokenizer_model=None).uncovered_terms == []

    def test_a_word_one_document_mentions_in_passing_is_uncovered(self, kb):
        assert hints(kb, "vexolith crashed").uncovered_terms == ["vexolith"]
        assert hints(kb, "vexolith crashed", passing_mention_df=0).uncovered_terms == []

    def test_a_quoted_alert_name_of_another_system_is_uncovered(self, kb):
        assert "KafkaConsumerGroupLag" in hints(kb, "[FIRING:1] KafkaConsumerGroupLag").uncovered_terms
        # A team's own name for a covered alert mostly reuses the titles' words: not uncovered.
        assert hints(kb, "[FIRING:1] DiskSpaceAlmostFull").uncovered_terms == []

    def test_warm_up_without_a_tokenizer_loads_nothing(self, kb):
        # A pipeline warms up every component, whatever its parameters.
        extractor = L0HintExtractor(tokenizer_model=None)
        extractor.warm_up()
        assert extractor.run(query="zorblax crashed", l0_index=kb)["hints"].uncovered_terms == []


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("title_min_overlap", 1.5, "[0, 1]"),
    ("domain_from_matches", "yes", "true or false"),
    ("domain_min_precision", -0.1, "[0, 1]"),
    ("tokenizer_model", "", "non-empty"),
    ("subject_elsewhere_margin", 2, "[0, 1]"),
    ("passing_mention_df", -1, "at least 0"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(lambda **changed: L0HintExtractor(**changed), parameter, value, rule)
