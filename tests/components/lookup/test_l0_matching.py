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


def test_a_word_only_mentioned_in_passing_is_uncovered_with_the_passing_mention_rule():
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
    index = L0Index(entries, term_df=term_df)
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
