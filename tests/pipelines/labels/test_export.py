"""Labels to eval rows: the latest label of a lookup counts, agreeing labels merge, disagreeing ones are left out."""

from datetime import UTC, datetime, timedelta

from pipelines.labels.export import build_export, format_summary, latest_labels
from pipelines.labels.split import label_split

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def label(n: int, query: str, verdict: str, sources=(), invocation: str | None = None) -> dict:
    return {
        "id": f"label-{n}",
        "invocation_id": invocation if invocation is not None else f"inv-{n}",
        "query": query,
        "verdict": verdict,
        "sources": list(sources),
        "reviewer": "alice",
        "origin": "cli",
        "created_at": T0 + timedelta(minutes=n),
    }


def all_rows(export) -> list[dict]:
    return [row for rows in export.rows.values() for row in rows]


def test_only_the_latest_label_of_a_lookup_counts():
    labels = [
        label(0, "disk full", "right_sources", ["disk/disk-full.md"], invocation="inv-a"),
        label(1, "disk full", "off_topic", invocation="inv-a"),
    ]
    latest, superseded = latest_labels(labels)
    assert [item["id"] for item in latest] == ["label-1"] and superseded == 1
    export = build_export(labels)
    assert all_rows(export) == [
        {"id": all_rows(export)[0]["id"], "query": "disk full", "relevant": [], "kind": "off_topic"}
    ]
    assert export.contradictions == {}  # the superseded label is no contradiction


def test_agreeing_labels_merge_and_disagreeing_ones_are_reported_and_left_out():
    export = build_export(
        [
            label(0, "Disk  Full", "right_sources", ["disk/disk-full.md"]),
            label(1, "disk full", "useful", ["disk/disk-full.md"]),  # an agent agreeing
            label(2, "pg lag", "right_sources", ["database/postgresql-replication-lag.md"]),
            label(3, "PG lag", "right_sources", ["disk/disk-full.md"]),
            label(4, "cake", "off_topic"),
            label(5, "cake", "right_sources", ["disk/disk-full.md"]),
            label(6, "cert expiry", "wrong"),
            label(7, "dns", "not_useful", ["network/dns.md"]),
        ]
    )
    rows = all_rows(export)
    assert [(row["query"], row["relevant"], row["kind"]) for row in rows] == [
        ("Disk  Full", ["disk/disk-full.md"], "answerable")
    ]
    assert rows[0] in export.rows[label_split("disk full")]
    assert export.duplicates == {"Disk  Full": 2}
    assert set(export.contradictions) == {"pg lag", "cake"}
    assert dict(export.silent) == {"wrong": 1, "not_useful": 1}
    summary = format_summary(export)
    assert "duplicates merged: 1 queries" in summary and "contradictions left out: 2 queries" in summary
    assert "left out, no right answer named: 1 not_useful, 1 wrong" in summary


def test_an_imported_label_without_a_lookup_counts_on_its_own():
    labels = [label(0, "disk full", "right_sources", ["disk/disk-full.md"], invocation="")]
    labels.append({**labels[0], "id": "label-1", "invocation_id": None})
    labels[0]["invocation_id"] = None
    export = build_export(labels)
    assert export.superseded == 0 and export.duplicates == {"disk full": 2}
