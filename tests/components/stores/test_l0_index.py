"""The L0 index built from the sample knowledge base: contents, title vectors, joined words, persistence."""

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


# joined words --------------------------------------------------------------------------------


def test_joined_words_are_the_camel_case_words_written_joined():
    text = "MySQL and RabbitMQ behind HAProxy; ReplicaSets and PostgreSQL, but not plain words or PVC"
    assert joined_words(text) == {"mysql", "rabbitmq", "haproxy", "replicaset", "postgresql"}


def test_the_sample_index_keeps_its_joined_words(l0):
    """Those of every document's text (title, keywords, content), not of the rest of its frontmatter."""
    posts = sample_files().values()
    in_contents = set().union(*(joined_words(post.content) for post in posts))
    in_files = set().union(*(joined_words(path.read_text(encoding="utf-8")) for path in SAMPLE_KB.rglob("*.md")))
    assert "mysql" in in_contents and in_contents <= l0.joined_words <= in_files


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
