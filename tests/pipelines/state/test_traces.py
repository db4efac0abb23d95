"""`knowledge traces show` formatting: every part of a recorded row, and nothing for the parts a row lacks."""

from datetime import UTC, datetime

from pipelines.state.traces import format_show

SECTION_TITLES = (
    "Query transform",
    "L0 hints",
    "Retrieval attempts",
    "Rerank trace",
    "Evidence (",
    "Context pack",
    "Sidecar:",
)


def full_row() -> dict:
    return {
        "id": "inv-1",
        "tool_name": "lookup_knowledge",
        "created_at": datetime(2026, 12, 1, 9, 30, tzinfo=UTC),
        "latency_ms": 12.345,
        "status": "error",
        "trace_status": "complete",
        "arguments": {"query": "pg réplica lag"},
        "found": True,
        "retrieval_layer": "L1",
        "error": "RuntimeError: slow",
        "retrieval_details": {
            "evidence_status": "sufficient",
            "relevance_level": "high",
            "completed_stages": ["transform", "retrieve"],
            "query_transform": {
                "normalized": "pg replica lag",
                "expansions": ["postgresql", "replication"],
                "truncated": True,
                "original_chars": 900,
            },
            "l0_hints": {"matched_titles": ["Replica lag"], "domains": ["database"], "entities": ["PostgreSQL"]},
            "fallback_reason": "filtered_vector_empty",
            "retrieval_trace": {
                "vector_store_mode": "auto",
                "selected_attempt": 2,
                "attempts": [
                    _attempt(1, "database", error="no usable candidate"),
                    _attempt(2, None),
                ],
            },
            "rerank_trace": [
                {"rank": 1, "final_score": 0.9, "base_score": 0.7, "source": "db/lag.md", "boosts": {"title": 0.2}},
                {"rank": 2, "final_score": 0.5, "base_score": 0.5, "source": "db/io.md", "boosts": {"title": 0.0}},
            ],
            "evidence_blocks": [
                {
                    "source": "db/lag.md",
                    "breadcrumb": "Lag > Causes",
                    "retrieval_layer": "L1",
                    "score": 0.7,
                    "rerank_score": 0.9,
                    "hit_reasons": ["vector:haystack attempt 2", "title"],
                    "content_preview": "word " * 100,
                    "content_chars": 500,
                },
                {"source": "db/io.md", "title": "Disk IO", "retrieval_layer": "L1", "score": 0.5},
            ],
            "final_evidence_count": 2,
            "candidate_count": 7,
            "context_pack_summary": {
                "used_tokens": 300,
                "budget_tokens": 1000,
                "truncated": False,
                "included_sources": ["db/lag.md"],
                "omitted_sources": ["db/io.md"],
            },
            "sidecar": {"status": "compared", "path": "/tmp/sidecar.jsonl"},
        },
    }


def _attempt(index: int, category: str | None, error: str | None = None) -> dict:
    return {
        "index": index,
        "category_filter": category,
        "path": "haystack",
        "candidate_count": 5,
        "usable_count": 0 if error else 3,
        "top_similarity": 0.61,
        "outcome": "retried" if error else "used",
        "query": "pg replica lag",
        "error": error,
    }


def line_with(text: str, needle: str) -> str:
    return next(line for line in text.splitlines() if needle in line)


def line_starting(text: str, prefix: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(prefix))


def test_show_prints_each_part_of_a_full_row():
    row = full_row()
    details = row["retrieval_details"]
    out = format_show(row)

    assert out.startswith("Invocation inv-1  (lookup_knowledge)")
    assert "2026-12-01 09:30:00 UTC" in out and "latency 12.3 ms" in out and "record complete" in out
    assert '"pg réplica lag"' in line_with(out, "arguments")
    assert "evidence status sufficient" in out and "relevance high" in out and "layer L1" in out
    assert line_starting(out, "  error ").endswith(row["error"])
    assert line_with(out, "completed").endswith("transform, retrieve")
    assert line_with(out, "expansions").endswith("postgresql, replication")
    assert line_with(out, "truncated ").endswith("from 900 characters")
    assert line_with(out, "titles").endswith("Replica lag") and line_with(out, "keywords").endswith(" -")
    assert "selected 2" in out and f"fallback {details['fallback_reason']}" in out
    assert line_with(out, "#1").startswith("  #1  category=database")
    assert line_with(out, "#2").startswith(" *#2  unfiltered")
    assert line_with(out, "note").endswith("no usable candidate")
    assert line_with(out, "db/lag.md     ").endswith("title +0.200")
    assert line_with(out, "db/io.md     ").endswith(" -")  # a zero boost is no boost
    assert "1. db/lag.md  Lag > Causes  [L1]" in out and "2. db/io.md  Disk IO  [L1]" in out
    assert line_with(out, "hits:").endswith("vector:haystack attempt 2; title")
    preview = line_with(out, "chars)")
    assert preview.endswith('…" (500 chars)') and len(preview) < 200
    assert "Evidence (2 of 7 candidates)" in out
    assert "300/1000 tokens, truncated False" in out
    assert line_with(out, "included").endswith("db/lag.md") and line_with(out, "omitted").endswith("db/io.md")
    assert out.endswith("Sidecar: compared (/tmp/sidecar.jsonl)")


def test_each_section_follows_one_blank_line_in_order():
    lines = format_show(full_row()).splitlines()
    positions = [next(n for n, line in enumerate(lines) if line.startswith(title)) for title in SECTION_TITLES]
    assert positions == sorted(positions)
    assert all(lines[n - 1] == "" and lines[n - 2] != "" for n in positions)
    assert lines.count("") == len(SECTION_TITLES)


def test_a_row_without_details_prints_the_call_alone():
    out = format_show({"id": "inv-2", "status": "ok"})
    assert "" not in out.splitlines()
    assert not any(title in out for title in SECTION_TITLES)
    assert "record -" in out and "evidence status -" in out and "latency - ms" in out


def test_empty_parts_print_their_placeholder_or_nothing():
    details = {
        "completed_stages": [],
        "retrieval_trace": {"attempts": [], "l1_enabled": False},
        "evidence_blocks": [],
        "sidecar": {"status": "disabled", "path": "x"},
    }
    out = format_show({"id": "inv-3", "retrieval_details": details})
    assert line_with(out, "completed").endswith("(no stage)")
    assert "(no attempt: L1 disabled)" in out and "fallback none" in out
    assert "Evidence (0 of ? candidates)" in out and "  (none)" in out
    assert "Sidecar" not in out
