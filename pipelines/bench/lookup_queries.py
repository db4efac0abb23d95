"""
The crafted queries of `knowledge bench lookup`: candidate texts meant for the filtered and the
fallback path, the path each really took (read from its retrieval trace), and the cases timed per
path; a path with fewer than `MIN_DISTINCT_CASES` distinct queries is not measured
(docs/benchmarks.md).
"""

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import zip_longest

from pipelines.bench.corpus import CorpusFile, copy_category

MEASURED_PATHS = ("filtered", "fallback")


# A latency figure from one or two distinct queries repeats their quirks (one runbook's chunk sizes,
# one filter's selectivity), not the path's cost: below this a path is reported as not measured.
MIN_DISTINCT_CASES = 3


# Queries per intended path, as (category named in the query, what it asks). Checked against
# the repeated runbook corpus: none shares enough words with a runbook title to match it in L0
# (a title match would add that title's categories, one per copy, and drop the filter).
# `filtered`: the named category covers the topic, its best chunk scores over the reference
# threshold. `fallback`: it does not (`general` holds four runbooks, `node` is host-level), so the
# filtered attempt has no usable chunk or a weak one and is retried unfiltered.
FILTERED_QUERIES = (
    ("etcd", "the keyspace is nearly at its storage limit, defragment it"),
    ("node", "disk almost full on the host"),
    ("kubernetes", "container restarts again and again"),
    ("etcd", "fsync to the write ahead log takes too long"),
    ("node", "host running out of inodes"),
    ("kubernetes", "volume claim nearly out of space"),
    ("alertmanager", "notifications are not delivered to slack or pagerduty"),
    ("node", "time on the machine is wrong"),
    ("kubernetes", "a deployment rollout is stuck"),
    ("prometheus", "the write ahead log of the time series database is corrupted"),
)


FALLBACK_QUERIES = (
    ("general", "disk almost full on the host"),
    ("node", "notifications fail to reach slack"),
    ("general", "container restarts again and again"),
    ("node", "webhook receiver returns errors for alert notifications"),
    ("general", "volume claim nearly out of space"),
    ("node", "recording rules cannot be evaluated"),
    ("general", "host running out of inodes"),
    ("node", "a deployment rollout is stuck"),
    ("general", "keyspace nearly at its storage limit, defragment it"),
    ("general", "time on the machine is wrong"),
)


# Topics drawn from the corpus per copy and path, beside the written ones: each copy takes the
# next few runbooks, so the copies together ask about many runbooks rather than the same ones.
CORPUS_TOPICS_PER_COPY = 4
# Words of a runbook's opening sentence kept as a topic: enough to say what the alert is about.
TOPIC_WORDS = 12
# The smallest categories host the fallback topics: they cover the fewest subjects, so another
# category's topic filtered on one of them finds no good chunk there.
FALLBACK_HOST_CATEGORIES = 2

_FRONT_MATTER = "---"
_SENTENCE_END = re.compile(r"[.:;!?](\s|$)")
_MARKUP = re.compile(r"[`*_\[\]()<>#|]")


@dataclass
class LookupCase:
    query: str
    path: str
    filter_expression: str | None
    fallback_reason: str | None
    category: str | None = None


def opening_sentence(text: str) -> str | None:
    """
    The first sentence of a runbook's first section under a heading (its `Meaning`, in the
    runbook corpus), markup removed and cut to `TOPIC_WORDS` words; None when it has none.
    """
    rows = text.splitlines()
    if rows and rows[0].strip() == _FRONT_MATTER:
        closing = next((i for i, row in enumerate(rows[1:], 1) if row.strip() == _FRONT_MATTER), 0)
        rows = rows[closing + 1 :]
    seen_heading = False
    for row in rows:
        stripped = row.strip()
        if stripped.startswith("#"):
            seen_heading = True
        elif seen_heading and stripped and stripped[0].isalpha():
            sentence = _SENTENCE_END.split(stripped, maxsplit=1)[0]
            words = _MARKUP.sub(" ", sentence).split()
            if len(words) >= 3:
                return " ".join(words[:TOPIC_WORDS])
    return None


def corpus_topics(files: Sequence[CorpusFile]) -> list[tuple[str, str]]:
    """(category, opening sentence) of every runbook that has one, in corpus order."""
    topics = []
    for item in files:
        sentence = opening_sentence(item.text)
        if sentence:
            topics.append((item.category, sentence))
    return topics


def fallback_hosts(files: Sequence[CorpusFile]) -> list[str]:
    """The `FALLBACK_HOST_CATEGORIES` categories with the fewest runbooks (ties by name)."""
    counts: dict[str, int] = {}
    for item in files:
        counts[item.category] = counts.get(item.category, 0) + 1
    return sorted(counts, key=lambda category: (counts[category], category))[:FALLBACK_HOST_CATEGORIES]


def corpus_pairs(files: Sequence[CorpusFile]) -> dict[str, list[tuple[str, str]]]:
    """
    (category named, topic) per intended path from the corpus's own runbooks: `filtered` names
    the runbook's own category; `fallback` names a small category that is not the runbook's,
    alternating between the hosts.
    """
    topics = corpus_topics(files)
    hosts = fallback_hosts(files)
    foreign = [(category, topic) for category, topic in topics if category not in hosts]
    fallback = [(hosts[number % len(hosts)], topic) for number, (_, topic) in enumerate(foreign)] if hosts else []
    return {"filtered": topics, "fallback": fallback}


def _rotated(pairs: Sequence[tuple[str, str]], start: int, count: int) -> list[tuple[str, str]]:
    return [pairs[(start + offset) % len(pairs)] for offset in range(min(count, len(pairs)))]


def lookup_query_candidates(files: Sequence[CorpusFile], copies: int) -> dict[str, list[str]]:
    """
    Query texts meant for each path, distinct, each naming the category of its copy
    (`etcd-3: ...`): the L0 layer recognises exactly that one domain, so the first attempt is
    filtered on it. Per copy: every written pair (`FILTERED_QUERIES`, `FALLBACK_QUERIES`), rotated
    so that each copy starts elsewhere, then `CORPUS_TOPICS_PER_COPY` topics from the corpus's
    runbooks. Which path a query really takes is read from its retrieval trace when it runs
    (`classify_queries`), not assumed from this list.
    """
    categories = {item.category for item in files}
    written = {"filtered": FILTERED_QUERIES, "fallback": FALLBACK_QUERIES}
    drawn = corpus_pairs(files)
    candidates: dict[str, list[str]] = {}
    for path in MEASURED_PATHS:
        usable = [(category, topic) for category, topic in written[path] if category in categories]
        texts: list[str] = []
        for copy in range(copies):
            pairs = _rotated(usable, copy, len(usable)) + _rotated(
                drawn[path], copy * CORPUS_TOPICS_PER_COPY, CORPUS_TOPICS_PER_COPY
            )
            texts += [f"{copy_category(category, copy)}: {topic}" for category, topic in pairs]
        candidates[path] = list(dict.fromkeys(texts))
    return candidates


def lookup_path(result) -> tuple[str, str | None]:
    """
    What happened in a lookup, from its retrieval trace: (`filtered` | `fallback` | `unfiltered`,
    the first attempt's filter expression).
    """
    trace = result.retrieval_trace
    first = trace.attempts[0] if trace.attempts else None
    if first is None or first.category_filter is None:
        return "unfiltered", None
    if trace.fallback_reason:
        return "fallback", first.filter_expression
    return "filtered", first.filter_expression


def classify_query(service, query: str) -> LookupCase:
    """Run one query through the pipeline and record which path it took."""
    result = service.lookup(query)
    path, expression = lookup_path(result)
    attempts = result.retrieval_trace.attempts
    category = attempts[0].category_filter if attempts else None
    return LookupCase(query, path, expression, result.retrieval_trace.fallback_reason, category)


def classify_queries(service, queries: Iterable[str]) -> list[LookupCase]:
    """Run each query once through the pipeline and record which path it took."""
    return [classify_query(service, query) for query in queries]


def distinct_count(cases: Iterable[LookupCase], path: str) -> int:
    return len({c.query for c in cases if c.path == path})


def _interleaved(candidates: dict[str, list[str]]) -> Iterator[tuple[str, str]]:
    """(intended path, query) taking one candidate of each path in turn."""
    labelled = [[(path, query) for query in queries] for path, queries in candidates.items()]
    for row in zip_longest(*labelled):
        yield from (item for item in row if item is not None)


def craft_cases(service, candidates: dict[str, list[str]], wanted: int) -> list[LookupCase]:
    """
    Classify candidates (one lookup each, the paths taking turns) until every measured path has
    `wanted` distinct cases or the candidates run out. A candidate meant for a path that already
    has enough is passed over: it would most likely land there too, and each costs a lookup.
    """
    cases: list[LookupCase] = []
    for intended, query in _interleaved(candidates):
        if all(distinct_count(cases, path) >= wanted for path in MEASURED_PATHS):
            break
        if distinct_count(cases, intended) >= wanted:
            continue
        cases.append(classify_query(service, query))
    return cases


def pick_cases(cases: Sequence[LookupCase], path: str, count: int) -> list[LookupCase]:
    """`count` cases of one path, cycling through the distinct ones when there are fewer."""
    matching = [c for c in cases if c.path == path]
    if not matching:
        return []
    return [matching[i % len(matching)] for i in range(count)]


def too_few_cases(cases: Sequence[LookupCase], path: str, min_cases: int = MIN_DISTINCT_CASES) -> dict | None:
    """
    The figures of a path with fewer than `min_cases` distinct crafted queries: how many it had
    and how many it needs, and nothing else (no latency, ratio or verdict). None when it has enough.
    """
    distinct = distinct_count(cases, path)
    return {"too_few_cases": distinct, "min_cases": min_cases} if distinct < min_cases else None


def not_measured_line(path: str, figures: dict) -> str:
    return (
        f"NOT MEASURED: only {figures['too_few_cases']} distinct crafted queries took the {path} path "
        f"({figures['min_cases']} needed)"
    )
