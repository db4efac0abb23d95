"""The L0 index built from the sample knowledge base: contents, title vectors and matching."""

import re

import frontmatter
import numpy as np
import pytest

from components.common.l0_words import joined_words
from components.common.text import terms
from components.contracts import EntityRef
from components.stores.l0_index import L0Entry, L0Index
from components.stores.l0_index_file import L0IndexHandle, L0IndexMissingError, load_l0_index, save_l0_index
from tests.conftest import SAMPLE_KB

CATEGORIES = ["certificates", "cpu", "database", "deployments", "disk", "memory", "network", "queues"]
POSTGRES_DOCS = {
    "database/postgresql-connection-pool-exhausted.md",
    "database/postgresql-replication-lag.md",
    "database/postgresql-slow-queries-and-locks.md",
}
CJK_DISK = "disk/filesystem-read-only-remount.md"
CJK_NGINX = "network/nginx-upstream-timeout.md"


@pytest.fixture(scope="module")
def l0(sample_cfg) -> L0Index:
    return load_l0_index(sample_cfg.l0.index_path)


def sample_files() -> dict[str, frontmatter.Post]:
    return {path.relative_to(SAMPLE_KB).as_posix(): frontmatter.load(path) for path in sorted(SAMPLE_KB.rglob("*.md"))}


def expected_entities(raw) -> list[EntityRef]:
    return [EntityRef(name=e["name"], aliases=list(e.get("aliases") or [])) for e in raw or []]


# contents ------------------------------------------------------------------------------------


def test_one_entry_per_sample_document(l0):
    assert [entry.source for entry in l0.entries] == sorted(sample_files())
    assert len(l0.entries) == 36


def test_entries_hold_the_frontmatter(l0):
    files = sample_files()
    with_frontmatter = 0
    for source, post in files.items():
        entry = l0.entry(source)
        if post.metadata:
            with_frontmatter += 1
            assert entry.title == post["title"]
            assert entry.category == post["category"]
            assert entry.keywords == post["keywords"]
            assert entry.entities == expected_entities(post.get("entities"))
        else:
            # Defaults: the first heading and the top-level folder.
            assert entry.title == re.search(r"^# (.+)$", post.content, re.MULTILINE).group(1)
            assert entry.category == source.split("/")[0]
            assert entry.keywords == [] and entry.entities == []
    assert 0 < with_frontmatter < len(files)  # the sample covers both cases


def test_specific_entries(l0):
    assert l0.entry("disk/disk-full.md").title == "Disk Full"
    assert "no space left on device" in l0.entry("disk/disk-full.md").keywords
    assert l0.entry("cpu/runaway-process.md").title == "Runaway Process Consuming CPU"
    assert l0.entry("cpu/runaway-process.md").category == "cpu"
    pg = l0.entry("database/postgresql-replication-lag.md").entities[0]
    assert pg == EntityRef(name="PostgreSQL", aliases=["postgres", "pg", "psql"])
    assert l0.entry(CJK_DISK).title == "文件系统被重新挂载为只读"
    assert l0.entry(CJK_NGINX).entities[0] == EntityRef(name="Nginx", aliases=["反向代理", "负载均衡器"])
    assert "Diagnosis" in l0.entry("disk/disk-full.md").headings
    assert l0.entry("no/such.md") is None


def test_categories(l0):
    assert l0.categories == CATEGORIES


def test_term_document_frequencies(l0):
    (replication,) = terms("replication")
    (disk,) = terms("disk")
    assert l0.term_df[replication] >= 2
    assert l0.idf(replication) > 0
    assert l0.idf(disk) < l0.idf(replication)  # common terms weigh less
    assert l0.idf("nosuchtermanywhere") == 0.0


def test_summary_vectors_one_per_entry(l0):
    vectors = l0.summary_vectors
    assert vectors is not None and vectors.shape == (len(l0.entries), 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    assert np.array_equal(
        l0.summary_vector("disk/disk-full.md"), vectors[[e.source for e in l0.entries].index("disk/disk-full.md")]
    )
    # Summaries of documents about the same thing lie closer than unrelated ones.
    pg_lag = l0.summary_vector("database/postgresql-replication-lag.md")
    pg_pool = l0.summary_vector("database/postgresql-connection-pool-exhausted.md")
    acme = l0.summary_vector("certificates/acme-renewal-failure.md")
    assert float(pg_lag @ pg_pool) > float(pg_lag @ acme)
    assert l0.model == "packaged:all-MiniLM-L6-v2"


# matching ------------------------------------------------------------------------------------


def test_alias_matches_the_entity(l0):
    hints = l0.match("postgres replication is behind")
    assert hints.entities == ["PostgreSQL"]
    assert set(hints.matched_sources) == POSTGRES_DOCS
    assert hints.domains == ["database"]
    assert l0.entity_expansions("postgres replication is behind") == ["PostgreSQL"]


def test_keyword_match(l0):
    hints = l0.match("writes fail with no space left on device")
    assert hints.matched_keywords == ["no space left on device"]
    assert set(hints.matched_sources) == {"disk/disk-full.md", "disk/inode-exhaustion.md"}
    assert hints.single_domain == "disk"


def test_category_name_match(l0):
    # "certificates" is named almost only by documents of its category: a reliable domain.
    assert l0.domain_precision["certificates"] >= 0.5
    hints = l0.match("something is wrong with the certificates", domain_from_matches=False)
    assert hints.domains == ["certificates"]
    assert hints.matched_sources == []


def test_category_named_everywhere_is_no_domain(l0):
    # "network" appears in runbooks of most categories, so naming it says little about the domain.
    assert l0.domain_precision["network"] < 0.5
    assert l0.match("network", domain_from_matches=False).domains == []
    assert l0.match("network", domain_from_matches=False, domain_min_precision=0.0).domains == ["network"]


def test_title_match(l0):
    hints = l0.match("High CPU steal time on our VMs")
    assert "High CPU Steal Time" in hints.matched_titles
    assert "cpu/high-cpu-steal.md" in hints.matched_sources


def test_cjk_queries_match_the_chinese_documents(l0):
    disk = l0.match("磁盘变成只读文件系统了")
    assert disk.matched_keywords == ["只读文件系统"]
    assert disk.matched_sources == [CJK_DISK]
    assert disk.domains == ["disk"]

    nginx = l0.match("反向代理报上游超时")
    assert set(nginx.matched_keywords) == {"上游超时", "反向代理"}
    assert nginx.entities == ["Nginx"]
    assert nginx.matched_sources == [CJK_NGINX]
    assert nginx.domains == ["network"]

    title = l0.match("文件系统被重新挂载为只读怎么办")
    assert title.matched_titles == ["文件系统被重新挂载为只读"]
    assert CJK_DISK in title.matched_sources


def test_short_alias_does_not_match_inside_a_word(l0):
    assert "PostgreSQL" in l0.match("pg is down").entities
    assert "PostgreSQL" not in l0.match("upgrade the kernel packages").entities
    assert "PostgreSQL" not in l0.match("pgbench results").entities


def test_unrelated_query_matches_nothing(l0):
    hints = l0.match("quarterly marketing budget review")
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
    hints = index.match("[FIRING:1] KubeQuotaAlmostFull (namespace=team-b resource=pods)")
    assert hints.named_sources == ["k8s/KubeQuotaAlmostFull.md"]
    assert hints.matched_titles[0] == "Kube Quota Almost Full"
    assert "k8s/KubeQuotaAlmostFull.md" in hints.matched_sources and hints.domains == ["k8s"]
    assert index.match("alertname=etcdgrpcrequestsslow instance=10.0.0.5:2379").named_sources == [
        "etcd/etcdGRPCRequestsSlow.md"
    ]


def test_only_identifier_names_match_by_name():
    """A one-word or plain-words name is no identifier: it never matches by name."""
    index = _named_index()
    assert index.match("the watchdog alert is firing").named_sources == []
    assert index.match("disk full on the host, see disk-full").named_sources == []
    assert index.match("kube quota almost full").named_sources == []  # the words, not the name


def test_name_expansions_give_the_titles_of_quoted_names():
    index = _named_index()
    assert index.name_expansions("[FIRING:2] KubeQuotaAlmostFull, KubeQuotaFullyUsed") == [
        "Kube Quota Almost Full",
        "Kube Quota Fully Used",
    ]
    assert index.name_expansions("KubeQuotaAlmostFull: Kube Quota Almost Full") == []  # already in words
    assert index.name_expansions("quota almost full") == []


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
    hints = index.match("CPU requests exceed what the cluster could schedule if one node went down")
    assert hints.matched_titles == [] and hints.domains == []
    named = index.match("half of the alertmanager cluster is down")
    assert named.matched_titles == ["Alertmanager Cluster Down"]
    assert named.single_domain == "alertmanager"
    # A category name the title does not contain ("kubernetes") is not asked for.
    assert index.match("kube cpu overcommit on the cluster").matched_titles == ["Kube CPU Overcommit"]


def test_an_unspecific_category_beside_a_specific_one_makes_the_domain_ambiguous():
    index = _subject_index()
    assert index.match("prometheus is slow", domain_from_matches=False).domains == []
    assert index.match("alertmanager is slow", domain_from_matches=False).single_domain == "alertmanager"
    both = index.match("after a policy change prometheus isn't talking to any alertmanager", domain_from_matches=False)
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
    plain = index.match(query, domain_from_matches=False, subject_elsewhere_margin=1.0)
    assert plain.single_domain == "alertmanager" and plain.domain_rules == []  # the rule off: a wrong filter
    hints = index.match(query, domain_from_matches=False)  # the default margin, as configured
    assert hints.domains == [] and hints.single_domain is None
    assert hints.domain_rules == ["named_as_subject_elsewhere: alertmanager (operator/OperatorReconcileErrors.md)"]
    assert hints.to_dict()["domainRules"] == hints.domain_rules
    # The product's own subject keeps its domain: its runbooks fit the rest of the query best.
    own = index.match(
        "alertmanager fails to reload its configuration", domain_from_matches=False, subject_elsewhere_margin=0.15
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
    assert base.named_as_subject_elsewhere("alertmanager", query_terms, 0.15) == expected
    assert grown.named_as_subject_elsewhere("alertmanager", query_terms, 0.15) == expected
    # An alertmanager runbook that covers the rest of the query as well keeps the domain.
    rival = L0Entry(
        "alertmanager/AlertmanagerReconcile.md",
        "Alertmanager Reconcile",
        "alertmanager",
        terms=["alertmanager", "controller", "reconcile", "object", "namespace", "error"],
    )
    with_rival = L0Index(grown.entries + [rival], term_df=base.term_df, domain_precision=base.domain_precision)
    assert with_rival.named_as_subject_elsewhere("alertmanager", query_terms, 0.15) is None


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
    assert index.uncovered_terms("Redis instance redis-cache-0:6379 has been down for 5 minutes.", common) == ["redis"]
    assert index.uncovered_terms("RabbitMQ is down", common) == ["rabbit"]  # CamelCase parts apart
    # Label values and resource names are no topic words; an inflection of a KB word is covered.
    assert index.uncovered_terms("deployment billing/invoice-api lags behind, cluster=logs-es", common) == [
        "deployment"
    ]
    assert index.uncovered_terms("the database lags behind its primary", common) == []
    assert index.uncovered_terms("it doesn't replicate, see ens5", common) == ["replicate"]
    assert index.uncovered_terms("数据库复制延迟", common) == []  # Latin-script words only
    # A known word with an English prefix is no name of its own ("nonprimary": not a system).
    assert index.uncovered_terms("the nonprimary database lags", common) == []


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
    assert index.uncovered_terms("kafka broker is down", common) == []  # any mention covers it
    assert index.uncovered_terms("kafka broker is down", common, passing_mention_df=1) == ["kafka"]
    # Named in a title (one document only): covered all the same.
    assert index.uncovered_terms("etcd has no leader", common, passing_mention_df=1) == []
    assert index.uncovered_terms("persistent volume is down", common, passing_mention_df=1) == []


def test_alert_names_a_notification_quotes_that_no_document_has_are_unknown():
    index = _named_index()
    assert index.unknown_alert_names("[FIRING:2] KafkaConsumerGroupLag group=billing") == ["KafkaConsumerGroupLag"]
    assert index.unknown_alert_names('alertname="NodeDiskAlmostFull" severity=warning') == ["NodeDiskAlmostFull"]
    assert index.unknown_alert_names("[RESOLVED] KubeQuotaAlmostFull namespace=team-b") == []  # a runbook's name
    assert index.unknown_alert_names("[FIRING:1] Watchdog") == []  # one word: no identifier
    assert index.unknown_alert_names("KafkaConsumerGroupLag fired") == []  # not where a notification names its alert


def test_an_unknown_alert_name_adds_its_words_to_the_expansions():
    index = _named_index()
    assert index.name_expansions("[FIRING:1] KubeQuotaAlmostFull, alertname=Kube_quota_nearly_full") == [
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
    assert index.uncovered_terms("[FIRING:1] KafkaConsumerGroupLag group=billing", common) == [
        "kafka",
        "KafkaConsumerGroupLag",
    ]
    assert index.uncovered_terms("[FIRING:1] QuotaAlmostFullWarning namespace=team-b", common) == []
    assert index.uncovered_terms("[FIRING:1] KubeQuotaAlmostFull namespace=team-b", common) == []


def test_joined_words_are_the_camel_case_words_written_joined():
    text = "MySQL and RabbitMQ behind HAProxy; ReplicaSets and PostgreSQL, but not plain words or PVC"
    assert joined_words(text) == {"mysql", "rabbitmq", "haproxy", "replicaset", "postgresql"}


def test_the_sample_index_keeps_its_joined_words(l0):
    """Those of every document's text (title, keywords, content), not of the rest of its frontmatter."""
    posts = sample_files().values()
    in_contents = set().union(*(joined_words(post.content) for post in posts))
    in_files = set().union(*(joined_words(path.read_text(encoding="utf-8")) for path in SAMPLE_KB.rglob("*.md")))
    assert "mysql" in in_contents and in_contents <= l0.joined_words <= in_files


def test_a_compound_word_is_uncovered_as_a_whole():
    """ "MySQL" splits into "my" and "sql", which say nothing: the whole word must be known."""
    entries = [L0Entry("db/lag.md", "Replication lag", "db")]
    common = frozenset({"replica", "is", "behind", "sql"})
    assert L0Index(entries, joined_words=set()).uncovered_terms("MySQL replica is behind", common) == ["mysql"]
    assert L0Index(entries, joined_words={"mysql"}).uncovered_terms("MySQL replica is behind", common) == []
    # An index written before joined words were kept compares the parts, as it always did.
    assert L0Index(entries).uncovered_terms("MySQL replica is behind", common) == []
    assert L0Index(entries, term_df={"mysql": 1}, joined_words=set()).uncovered_terms("MYSQL, MySQL", common) == []


def test_words_the_kb_writes_in_camel_case_or_inflected_are_covered():
    """The KB's "ReplicaSets" covers a query's "replicasets"; its "expires" covers "expire"."""
    text = "Each of the ReplicaSets expires; endpoints are scraped"
    index = L0Index(
        [L0Entry("k8s/rs.md", "ReplicaSets", "k8s")],
        term_df={t: 1 for t in terms(text)},
        joined_words=joined_words(text),
    )
    assert (
        index.uncovered_terms(
            "replicasets that will expire, endpoint not scrapeable", frozenset({"that", "will", "not"})
        )
        == []
    )
    assert index.uncovered_terms("statefulsets", frozenset()) == ["statefulsets"]


def test_the_sample_kb_covers_mysql(l0):
    assert l0.uncovered_terms("MySQL replica is behind", frozenset({"replica", "is", "behind"})) == []


# persistence ---------------------------------------------------------------------------------


def test_save_and_load_round_trip(tmp_path):
    entries = [
        L0Entry("a/x.md", "Disk Full", "a", ["df"], [EntityRef("ext4", ["ext4 fs"])], ["Disk Full", "Fix"]),
        L0Entry("b/y.md", "网关超时", "b"),
    ]
    vectors = np.eye(2, 4, dtype=np.float32)
    path = tmp_path / "state" / "kb.l0.json"
    save_l0_index(L0Index(entries, vectors, "m", {"disk": 1}, {"a": 0.75}, {"mysql"}), path)
    loaded = load_l0_index(path)
    assert loaded.entries == entries
    assert np.array_equal(loaded.summary_vectors, vectors)
    assert (loaded.model, loaded.term_df, loaded.domain_precision) == ("m", {"disk": 1}, {"a": 0.75})
    assert loaded.joined_words == {"mysql"}
    assert "网关超时" in path.read_text(encoding="utf-8")  # kept readable, not \\u-escaped

    save_l0_index(L0Index(entries[:1], None), path)  # saving without vectors removes the stale array
    assert load_l0_index(path).summary_vectors is None
    assert load_l0_index(path).joined_words is None  # as in an index written before they were kept


def test_missing_index_says_what_to_do(tmp_path):
    with pytest.raises(L0IndexMissingError, match="knowledge index"):
        load_l0_index(tmp_path / "none.l0.json")
    with pytest.raises(L0IndexMissingError):
        L0IndexHandle(tmp_path / "none.l0.json").get()


def test_handle_reloads_a_changed_index(tmp_path):
    path = tmp_path / "kb.l0.json"
    save_l0_index(L0Index([L0Entry("a.md", "One", "general")]), path)
    handle = L0IndexHandle(path)
    first = handle.get()
    assert handle.get() is first  # unchanged file: the same object
    save_l0_index(L0Index([L0Entry("a.md", "One", "general"), L0Entry("b.md", "Two", "general")]), path)
    assert [e.source for e in handle.get().entries] == ["a.md", "b.md"]
