"""The matching of a query against the L0 index: names, titles, keywords, entities, domains, expansions, uncovered words."""

import pytest

from components.common.l0_words import joined_words
from components.common.text import terms
from components.indexing.l0_index_writer import l0_index_of
from components.indexing.markdown_reader import MarkdownKnowledgeReader
from components.lookup.l0_matching import (
    entity_expansions,
    match,
    name_expansions,
    named_as_subject_elsewhere,
    uncovered_terms,
    unknown_alert_names,
)
from components.stores.l0_index import L0Entry, L0Index
from tests.conftest import SAMPLE_KB

POSTGRES_DOCS = {
    "database/postgresql-connection-pool-exhausted.md",
    "database/postgresql-replication-lag.md",
    "database/postgresql-slow-queries-and-locks.md",
}
CJK_DISK = "disk/filesystem-read-only-remount.md"
CJK_NGINX = "network/nginx-upstream-timeout.md"


@pytest.fixture(scope="module")
def l0() -> L0Index:
    """The index of the sample knowledge base, built from its markdown (matching reads no vectors)."""
    return l0_index_of(MarkdownKnowledgeReader(str(SAMPLE_KB)).run()["documents"])


def test_alias_matches_the_entity(l0):
    hints = match(l0, "postgres replication is behind")
    assert hints.entities == ["PostgreSQL"]
    assert set(hints.matched_sources) == POSTGRES_DOCS
    assert hints.domains == ["database"]
    assert entity_expansions(l0, "postgres replication is behind") == ["PostgreSQL"]


def test_keyword_match(l0):
    hints = match(l0, "writes fail with no space left on device")
    assert hints.matched_keywords == ["no space left on device"]
    assert set(hints.matched_sources) == {"disk/disk-full.md", "disk/inode-exhaustion.md"}
    assert hints.single_domain == "disk"


def test_category_name_match(l0):
    # "certificates" is named almost only by documents of its category: a reliable domain.
    assert l0.domain_precision["certificates"] >= 0.5
    hints = match(l0, "something is wrong with the certificates", domain_from_matches=False)
    assert hints.domains == ["certificates"]
    assert hints.matched_sources == []


def test_category_named_everywhere_is_no_domain(l0):
    # "network" appears in runbooks of most categories, so naming it says little about the domain.
    assert l0.domain_precision["network"] < 0.5
    assert match(l0, "network", domain_from_matches=False).domains == []
    assert match(l0, "network", domain_from_matches=False, domain_min_precision=0.0).domains == ["network"]


def test_title_match(l0):
    hints = match(l0, "High CPU steal time on our VMs")
    assert "High CPU Steal Time" in hints.matched_titles
    assert "cpu/high-cpu-steal.md" in hints.matched_sources


def test_cjk_queries_match_the_chinese_documents(l0):
    disk = match(l0, "磁盘变成只读文件系统了")
    assert disk.matched_keywords == ["只读文件系统"]
    assert disk.matched_sources == [CJK_DISK]
    assert disk.domains == ["disk"]

    nginx = match(l0, "反向代理报上游超时")
    assert set(nginx.matched_keywords) == {"上游超时", "反向代理"}
    assert nginx.entities == ["Nginx"]
    assert nginx.matched_sources == [CJK_NGINX]
    assert nginx.domains == ["network"]

    title = match(l0, "文件系统被重新挂载为只读怎么办")
    assert title.matched_titles == ["文件系统被重新挂载为只读"]
    assert CJK_DISK in title.matched_sources


def test_short_alias_does_not_match_inside_a_word(l0):
    assert "PostgreSQL" in match(l0, "pg is down").entities
    assert "PostgreSQL" not in match(l0, "upgrade the kernel packages").entities
    assert "PostgreSQL" not in match(l0, "pgbench results").entities


def test_unrelated_query_matches_nothing(l0):
    hints = match(l0, "quarterly marketing budget review")
    assert not hints.has_matches
    assert hints.matched_sources == []


def _named_index() -> L0Index:
    return L0Index(
        [
            L0Entry(
                "k8s/KubeQuotaAlmostFull.md",
                "Kube Quota Almost Full",
                "k8s",
                headings=["KubeQuotaAlmostFull", "Meaning"],
            ),
            L0Entry("k8s/KubeQuotaFullyUsed.md", "Kube Quota Fully Used", "k8s", headings=["KubeQuotaFullyUsed"]),
            L0Entry(
                "etcd/etcdGRPCRequestsSlow.md", "etcd GRPC Requests Slow", "etcd", headings=["etcdGRPCRequestsSlow"]
            ),
            L0Entry("ops/watchdog.md", "Watchdog", "ops", headings=["Watchdog"]),
            L0Entry("ops/disk-full.md", "Disk full", "ops", headings=["Disk full"]),
        ]
    )


def test_a_quoted_document_name_is_a_named_match():
    """An alert notification quotes the alert name: the runbook named so is matched by name."""
    index = _named_index()
    hints = match(index, "[FIRING:1] KubeQuotaAlmostFull (namespace=team-b resource=pods)")
    assert hints.named_sources == ["k8s/KubeQuotaAlmostFull.md"]
    assert hints.matched_titles[0] == "Kube Quota Almost Full"
    assert "k8s/KubeQuotaAlmostFull.md" in hints.matched_sources and hints.domains == ["k8s"]
    assert match(index, "alertname=etcdgrpcrequestsslow instance=10.0.0.5:2379").named_sources == [
        "etcd/etcdGRPCRequestsSlow.md"
    ]


def test_only_identifier_names_match_by_name():
    """A one-word or plain-words name is no identifier: it never matches by name."""
    index = _named_index()
    assert match(index, "the watchdog alert is firing").named_sources == []
    assert match(index, "disk full on the host, see disk-full").named_sources == []
    assert match(index, "kube quota almost full").named_sources == []  # the words, not the name


def test_name_expansions_give_the_titles_of_quoted_names():
    index = _named_index()
    assert name_expansions(index, "[FIRING:2] KubeQuotaAlmostFull, KubeQuotaFullyUsed") == [
        "Kube Quota Almost Full",
        "Kube Quota Fully Used",
    ]
    assert name_expansions(index, "KubeQuotaAlmostFull: Kube Quota Almost Full") == []  # already in words
    assert name_expansions(index, "quota almost full") == []


def _subject_index() -> L0Index:
    return L0Index(
        [
            L0Entry("alertmanager/AlertmanagerClusterDown.md", "Alertmanager Cluster Down", "alertmanager"),
            L0Entry("kubernetes/KubeCPUOvercommit.md", "Kube CPU Overcommit", "kubernetes"),
            L0Entry(
                "prometheus/PrometheusNotConnectedToAlertmanagers.md",
                "Prometheus Not Connected To Alertmanagers",
                "prometheus",
            ),
        ],
        domain_precision={"alertmanager": 0.9, "kubernetes": 0.8, "prometheus": 0.2},
    )


def test_a_title_naming_its_category_needs_the_name_in_the_query():
    """ "Cluster ... down" without "alertmanager" is another subject's cluster going down."""
    index = _subject_index()
    hints = match(index, "CPU requests exceed what the cluster could schedule if one node went down")
    assert hints.matched_titles == [] and hints.domains == []
    named = match(index, "half of the alertmanager cluster is down")
    assert named.matched_titles == ["Alertmanager Cluster Down"]
    assert named.single_domain == "alertmanager"
    # A category name the title does not contain ("kubernetes") is not asked for.
    assert match(index, "kube cpu overcommit on the cluster").matched_titles == ["Kube CPU Overcommit"]


def test_an_unspecific_category_beside_a_specific_one_makes_the_domain_ambiguous():
    index = _subject_index()
    assert match(index, "prometheus is slow", domain_from_matches=False).domains == []
    assert match(index, "alertmanager is slow", domain_from_matches=False).single_domain == "alertmanager"
    both = match(index, "after a policy change prometheus isn't talking to any alertmanager", domain_from_matches=False)
    assert sorted(both.domains) == ["alertmanager", "prometheus"]
    assert both.single_domain is None


def _sibling_product_index() -> L0Index:
    """An operator's runbook that names the product it manages, beside the product's own runbooks."""
    entries = [
        L0Entry(
            "alertmanager/AlertmanagerFailedReload.md",
            "Alertmanager Failed Reload",
            "alertmanager",
            terms=["alertmanager", "configuration", "reload", "fail"],
        ),
        L0Entry(
            "alertmanager/AlertmanagerClusterDown.md",
            "Alertmanager Cluster Down",
            "alertmanager",
            terms=["alertmanager", "cluster", "instance", "down"],
        ),
        L0Entry(
            "operator/OperatorReconcileErrors.md",
            "Operator Reconcile Errors",
            "operator",
            terms=["operator", "controller", "reconcile", "alertmanager", "prometheus", "object", "namespace", "error"],
        ),
        L0Entry("operator/OperatorNotReady.md", "Operator Not Ready", "operator", terms=["operator", "ready", "pod"]),
    ]
    term_df: dict[str, int] = {}
    for entry in entries:
        for term in set(entry.terms) | set(terms(entry.title)):
            term_df[term] = term_df.get(term, 0) + 1
    return L0Index(entries, term_df=term_df, domain_precision={"alertmanager": 0.7, "operator": 1.0})


def test_a_product_named_as_the_subject_of_another_categorys_runbook_is_no_domain():
    index = _sibling_product_index()
    query = "controller alertmanager in monitoring namespace fails to reconcile 2 objects"
    plain = match(index, query, domain_from_matches=False, subject_elsewhere_margin=1.0)
    assert plain.single_domain == "alertmanager" and plain.domain_rules == []  # the rule off: a wrong filter
    hints = match(index, query, domain_from_matches=False)  # the default margin, as configured
    assert hints.domains == [] and hints.single_domain is None
    assert hints.domain_rules == ["named_as_subject_elsewhere: alertmanager (operator/OperatorReconcileErrors.md)"]
    assert hints.to_dict()["domainRules"] == hints.domain_rules
    # The product's own subject keeps its domain: its runbooks fit the rest of the query best.
    own = match(
        index,
        "alertmanager fails to reload its configuration",
        domain_from_matches=False,
        subject_elsewhere_margin=0.15,
    )
    assert own.single_domain == "alertmanager" and own.domain_rules == []


def test_the_subject_elsewhere_rule_reads_only_documents_that_share_a_query_term():
    """Found through term postings: many unrelated documents change nothing, and one added late counts."""
    base = _sibling_product_index()
    filler = [
        L0Entry(f"storage/Disk{n}.md", f"Disk {n}", "storage", terms=["disk", "volume", f"device{n}"])
        for n in range(300)
    ]
    query_terms = set(terms("controller alertmanager in monitoring namespace fails to reconcile 2 objects"))
    grown = L0Index(filler + base.entries, term_df=base.term_df, domain_precision=base.domain_precision)
    expected = "operator/OperatorReconcileErrors.md"
    assert named_as_subject_elsewhere(base, "alertmanager", query_terms, 0.15) == expected
    assert named_as_subject_elsewhere(grown, "alertmanager", query_terms, 0.15) == expected
    # An alertmanager runbook that covers the rest of the query as well keeps the domain.
    rival = L0Entry(
        "alertmanager/AlertmanagerReconcile.md",
        "Alertmanager Reconcile",
        "alertmanager",
        terms=["alertmanager", "controller", "reconcile", "object", "namespace", "error"],
    )
    with_rival = L0Index(grown.entries + [rival], term_df=base.term_df, domain_precision=base.domain_precision)
    assert named_as_subject_elsewhere(with_rival, "alertmanager", query_terms, 0.15) is None


def test_uncovered_terms_are_words_no_document_uses_and_no_common_word():
    """Names of things the knowledge base does not cover; label values and inflections aside."""
    index = L0Index(
        [
            L0Entry(
                "k8s/lag.md",
                "Replication lag",
                "k8s",
                terms=sorted(set(terms("replication lag of the primary database"))),
            )
        ],
        term_df={t: 1 for t in terms("replication lag of the primary database")},
    )
    common = frozenset(
        {"instance", "has", "been", "down", "for", "minutes", "the", "behind", "its", "cache", "is", "see"}
    )
    assert uncovered_terms(index, "Redis instance redis-cache-0:6379 has been down for 5 minutes.", common) == ["redis"]
    assert uncovered_terms(index, "RabbitMQ is down", common) == ["rabbit"]  # CamelCase parts apart
    # Label values and resource names are no topic words; an inflection of a KB word is covered.
    assert uncovered_terms(index, "deployment billing/invoice-api lags behind, cluster=logs-es", common) == [
        "deployment"
    ]
    assert uncovered_terms(index, "the database lags behind its primary", common) == []
    assert uncovered_terms(index, "it doesn't replicate, see ens5", common) == ["replicate"]
    assert uncovered_terms(index, "数据库复制延迟", common) == []  # Latin-script words only
    # A known word with an English prefix is no name of its own ("nonprimary": not a system).
    assert uncovered_terms(index, "the nonprimary database lags", common) == []


@pytest.mark.parametrize("joined", [None, set()], ids=["parts", "joined_words"])
def test_a_word_only_mentioned_in_passing_is_uncovered_with_the_passing_mention_rule(joined):
    """ "kafka" in one runbook's list of workloads is no runbook about Kafka; a title word is."""
    volume_terms = terms("persistent volume filling up, stateful workloads such as kafka or etcd")
    entries = [
        L0Entry(
            "k8s/PersistentVolumeFillingUp.md", "Persistent Volume Filling Up", "k8s", terms=sorted(set(volume_terms))
        ),
        L0Entry("etcd/EtcdNoLeader.md", "Etcd No Leader", "etcd", terms=["etcd", "leader"]),
    ]
    term_df: dict[str, int] = {}
    for entry in entries:
        for term in set(entry.terms) | set(terms(entry.title)):
            term_df[term] = term_df.get(term, 0) + 1
    index = L0Index(entries, term_df=term_df, joined_words=joined)
    common = frozenset({"broker", "is", "down", "has", "no"})
    assert uncovered_terms(index, "kafka broker is down", common) == []  # any mention covers it
    assert uncovered_terms(index, "kafka broker is down", common, passing_mention_df=1) == ["kafka"]
    # Named in a title (one document only): covered all the same.
    assert uncovered_terms(index, "etcd has no leader", common, passing_mention_df=1) == []
    assert uncovered_terms(index, "persistent volume is down", common, passing_mention_df=1) == []


def test_alert_names_a_notification_quotes_that_no_document_has_are_unknown():
    index = _named_index()
    assert unknown_alert_names(index, "[FIRING:2] KafkaConsumerGroupLag group=billing") == ["KafkaConsumerGroupLag"]
    assert unknown_alert_names(index, 'alertname="NodeDiskAlmostFull" severity=warning') == ["NodeDiskAlmostFull"]
    assert unknown_alert_names(index, "[RESOLVED] KubeQuotaAlmostFull namespace=team-b") == []  # a runbook's name
    assert unknown_alert_names(index, "[FIRING:1] Watchdog") == []  # one word: no identifier
    assert unknown_alert_names(index, "KafkaConsumerGroupLag fired") == []  # not where a notification names its alert


def test_an_unknown_alert_name_adds_its_words_to_the_expansions():
    index = _named_index()
    assert name_expansions(index, "[FIRING:1] KubeQuotaAlmostFull, alertname=Kube_quota_nearly_full") == [
        "Kube Quota Almost Full",
        "Kube quota nearly full",
    ]


def test_an_unknown_alert_name_sharing_few_title_words_is_uncovered():
    """
    A team's own name for a covered alert reuses the titles' words; an alert of another system
    hardly any, and then it counts as an uncovered term.
    """
    index = _named_index()
    common = frozenset({"consumer", "group", "lag", "namespace", "warning", "kube", "quota", "almost", "full"})
    assert uncovered_terms(index, "[FIRING:1] KafkaConsumerGroupLag group=billing", common) == [
        "kafka",
        "KafkaConsumerGroupLag",
    ]
    assert uncovered_terms(index, "[FIRING:1] QuotaAlmostFullWarning namespace=team-b", common) == []
    assert uncovered_terms(index, "[FIRING:1] KubeQuotaAlmostFull namespace=team-b", common) == []


def test_a_compound_word_is_uncovered_as_a_whole():
    """ "MySQL" splits into "my" and "sql", which say nothing: the whole word must be known."""
    entries = [L0Entry("db/lag.md", "Replication lag", "db")]
    common = frozenset({"replica", "is", "behind", "sql"})
    assert uncovered_terms(L0Index(entries, joined_words=set()), "MySQL replica is behind", common) == ["mysql"]
    assert uncovered_terms(L0Index(entries, joined_words={"mysql"}), "MySQL replica is behind", common) == []
    # An index written before joined words were kept compares the parts, as it always did.
    assert uncovered_terms(L0Index(entries), "MySQL replica is behind", common) == []
    assert uncovered_terms(L0Index(entries, term_df={"mysql": 1}, joined_words=set()), "MYSQL, MySQL", common) == []


def test_words_the_kb_writes_in_camel_case_or_inflected_are_covered():
    """The KB's "ReplicaSets" covers a query's "replicasets"; its "expires" covers "expire"."""
    text = "Each of the ReplicaSets expires; endpoints are scraped"
    index = L0Index(
        [L0Entry("k8s/rs.md", "ReplicaSets", "k8s")],
        term_df={t: 1 for t in terms(text)},
        joined_words=joined_words(text),
    )
    assert (
        uncovered_terms(
            index, "replicasets that will expire, endpoint not scrapeable", frozenset({"that", "will", "not"})
        )
        == []
    )
    assert uncovered_terms(index, "statefulsets", frozenset()) == ["statefulsets"]


def test_the_sample_kb_covers_mysql(l0):
    assert uncovered_terms(l0, "MySQL replica is behind", frozenset({"replica", "is", "behind"})) == []


def test_an_alias_beside_its_entitys_own_name_adds_no_expansion(l0):
    assert entity_expansions(l0, "postgres replication lag") == ["PostgreSQL"]
    assert entity_expansions(l0, "postgres replication lag on PostgreSQL 15") == []


def test_numbers_and_addresses_of_a_query_are_no_title_words():
    """A count in an alert ("restarted 15 times") is not the release number of a title."""
    index = L0Index([L0Entry("db/upgrade.md", "Upgrade to Release 15", "db")])
    assert match(index, "pod restarted 15 times after the upgrade").matched_titles == []
    assert match(index, "upgrade to the new release").matched_titles == ["Upgrade to Release 15"]


def _keyword_index() -> L0Index:
    return L0Index(
        [L0Entry("ops/pressure.md", "Pressure", "ops", keywords=["throttling", "oom", "replication lag"])],
    )


def test_a_one_word_keyword_matches_as_a_phrase():
    assert match(_keyword_index(), "cpu throttling on the pods").matched_keywords == ["throttling"]


def test_a_keyword_inside_a_longer_word_does_not_match():
    assert match(_keyword_index(), "no room left for the cache").matched_keywords == []
    assert match(_keyword_index(), "oom in the cache").matched_keywords == ["oom"]


def test_a_keyword_of_two_terms_matches_by_its_terms_in_any_order():
    assert match(_keyword_index(), "lag of replication").matched_keywords == ["replication lag"]
    assert match(_keyword_index(), "replication is slow").matched_keywords == []


def test_one_shared_word_of_a_longer_title_is_not_enough_however_rare():
    """ "leader" carries most of the title's weight ("etcd" is in every title), but it is one word of two."""
    titles = ["Etcd No Leader", "Etcd Backup", "Etcd Defrag", "Etcd Slow Disk"]
    entries = [L0Entry(f"kv/{n}.md", title, "kv") for n, title in enumerate(titles)]
    index = L0Index(entries, term_df={"etcd": 4, "leader": 1, "backup": 1, "defrag": 1, "slow": 1, "disk": 1})
    assert index.title_weights["leader"] > 0.6 * index.entry_terms[0].title_weight
    assert match(index, "no leader elected").matched_titles == []
    assert match(index, "etcd has no leader").matched_titles == ["Etcd No Leader"]


def test_a_title_that_is_its_categorys_name_matches_a_query_naming_only_it():
    index = L0Index([L0Entry("kafka/overview.md", "Kafka", "kafka")])
    assert match(index, "kafka").matched_titles == ["Kafka"]


def test_a_title_left_out_for_its_category_name_leaves_the_titles_after_it():
    hints = match(_subject_index(), "kube cpu overcommit, the cluster went down")
    assert hints.matched_titles == ["Kube CPU Overcommit"]


def test_a_title_covered_exactly_at_the_minimum_overlap_matches():
    """All title words weigh alike here, so a query with all of them reaches an overlap of 1.0 exactly."""
    assert match(_subject_index(), "kube cpu overcommit", title_min_overlap=1.0).matched_titles == [
        "Kube CPU Overcommit"
    ]


def test_a_category_name_inside_a_longer_word_is_not_named():
    assert match(_named_index(), "etcdctl snapshot save failed", domain_from_matches=False).domains == []
    assert match(_named_index(), "etcd snapshot save failed", domain_from_matches=False).domains == ["etcd"]


def test_a_category_without_a_measured_precision_counts_as_specific():
    index = _named_index()
    assert "etcd" not in index.domain_precision
    assert match(index, "etcd is slow", domain_from_matches=False, domain_min_precision=1.0).domains == ["etcd"]


def test_a_category_named_exactly_at_the_minimum_precision_is_a_domain():
    hints = match(_subject_index(), "alertmanager is slow", domain_from_matches=False, domain_min_precision=0.9)
    assert hints.single_domain == "alertmanager"


def _coverage_index(inside_terms: list[str], outside_terms: list[list[str]]) -> L0Index:
    """
    One alertmanager runbook and operator runbooks that name alertmanager, over the rest words
    "controller" and "reconcile"; every word in one document at most, so that each weighs the same.
    """
    entries = [L0Entry("alertmanager/Am.md", "Am", "alertmanager", terms=["alertmanager", *inside_terms])]
    entries += [
        L0Entry(f"operator/Op{n}.md", f"Op{n}", "operator", terms=["alertmanager", *words])
        for n, words in enumerate(outside_terms)
    ]
    entries += [L0Entry(f"other/O{n}.md", f"O{n}", "other") for n in range(4)]
    return L0Index(entries, term_df={"alertmanager": 3, "controller": 1, "reconcile": 1})


REST = {"alertmanager", "controller", "reconcile"}


def test_a_document_elsewhere_must_cover_the_rest_better_by_the_margin():
    # Covering all of the rest (1.0) against the product's own half (0.5): better by exactly 0.5.
    index = _coverage_index(["controller"], [["controller", "reconcile"]])
    assert named_as_subject_elsewhere(index, "alertmanager", REST, 0.5) == "operator/Op0.md"
    assert named_as_subject_elsewhere(index, "alertmanager", REST, 0.55) is None


def test_a_document_elsewhere_covering_too_little_of_the_rest_is_no_subject():
    """No alertmanager runbook covers any of the rest; the operator's covers half of it."""
    index = _coverage_index([], [["reconcile"]])
    assert named_as_subject_elsewhere(index, "alertmanager", REST, 0.5) == "operator/Op0.md"
    assert named_as_subject_elsewhere(index, "alertmanager", REST, 0.6) is None


def test_of_documents_elsewhere_covering_the_rest_alike_the_first_is_named():
    index = _coverage_index([], [["controller", "reconcile"], ["controller", "reconcile"]])
    assert named_as_subject_elsewhere(index, "alertmanager", REST, 0.15) == "operator/Op0.md"


def test_a_category_name_of_no_terms_is_never_named_elsewhere():
    """ "IT" is a stopword: every document would name it."""
    index = _coverage_index([], [["controller", "reconcile"]])
    assert named_as_subject_elsewhere(index, "IT", {"controller", "reconcile"}, 0.15) is None


def test_every_word_is_compared_after_a_known_or_a_compound_one():
    index = L0Index([L0Entry("db/lag.md", "Replication lag", "db")], joined_words=set())
    common = frozenset({"replica", "behind", "and"})
    assert uncovered_terms(index, "replica behind MySQL and redis", common) == ["mysql", "redis"]


def test_a_part_of_three_letters_or_more_is_compared_a_shorter_one_skipped():
    """ "db" of "MongoDBDown" names nothing; "vpn" may name a thing."""
    index = L0Index([L0Entry("db/lag.md", "Replication lag", "db")])
    assert uncovered_terms(index, "MongoDBDown", frozenset()) == ["mongo", "down"]
    assert uncovered_terms(index, "the vpn is down", frozenset({"the", "is", "down"})) == ["vpn"]


@pytest.mark.parametrize("passing_mention_df", [0, 1])
def test_a_word_an_entity_names_is_covered_though_no_documents_text_uses_it(l0, passing_mention_df):
    """Regression: "mariadb", an alias of MySQL in the frontmatter only, was uncovered beside the entity it matched."""
    assert l0.term_df.get("mariadb", 0) == 0 and match(l0, "mariadb deadlocks").entities == ["MySQL"]
    common = frozenset({"deadlocks", "eating", "cpu"})
    assert uncovered_terms(l0, "mariadb deadlocks", common, passing_mention_df) == []
    assert uncovered_terms(l0, "kswapd eating cpu", common, passing_mention_df) == []


def test_an_unknown_alert_name_half_of_whose_words_are_title_words_is_covered():
    common = frozenset({"quota", "exhausted", "lagging"})
    assert uncovered_terms(_named_index(), "[FIRING:1] QuotaExhausted", common) == []
    assert uncovered_terms(_named_index(), "[FIRING:1] KafkaLagging", common) == ["kafka", "KafkaLagging"]
