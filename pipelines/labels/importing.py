"""
`knowledge labels import FILE`: the rows of an eval JSONL as labels (demos, tests, measuring).

An imported label links to no lookup (`invocation_id` empty, origin `import`): it states what
answers a query, which is all an eval set needs. Its id is a hash of reviewer, query and claim,
so importing a file twice stores nothing twice. The sources are not checked against the index:
an eval file may be written for another knowledge base (`knowledge eval` checks them when run).
"""

import hashlib
from pathlib import Path

from components.tracing.label_records import OFF_TOPIC, RIGHT_SOURCES
from components.tracing.trace_store import TraceStore
from pipelines.evaluation.queries import load_queries
from pipelines.labels.record import new_label
from pipelines.labels.split import normalised_query

LABEL_ID_PREFIX = "import:"


def imported_label_id(reviewer: str, query: str, verdict: str, sources: list[str]) -> str:
    key = "\x1f".join([reviewer, normalised_query(query), verdict, *sorted(sources)])
    return LABEL_ID_PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def import_labels(store: TraceStore, path: Path, reviewer: str) -> tuple[int, int, dict[str, int]]:
    """(rows read, labels new, statuses of the writes) of one eval file."""
    queries = load_queries(path)
    before = len(store.labels())
    statuses: dict[str, int] = {}
    for query in queries:
        verdict = OFF_TOPIC if query.kind == "off_topic" else RIGHT_SOURCES
        sources = sorted(query.relevant) if verdict == RIGHT_SOURCES else []
        label_id = imported_label_id(reviewer, query.query, verdict, sources)
        status = store.write_label(new_label(None, query.query, verdict, sources, reviewer, "import", label_id))
        statuses[status] = statuses.get(status, 0) + 1
    return len(queries), len(store.labels()) - before, statuses
