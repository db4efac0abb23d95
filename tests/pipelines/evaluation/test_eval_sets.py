"""The labelled query sets of eval/: every relevant source exists in the corpus they are written for."""

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
RUNBOOKS = REPO.parent / "shared" / "corpus" / "prometheus-runbooks"
SETS = sorted(p for p in (REPO / "eval").glob("*.jsonl") if p.name != "sample-kb.jsonl")


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.name)
def test_every_query_is_labelled_with_sources_of_the_runbook_corpus(path):
    if not RUNBOOKS.is_dir():
        pytest.skip(f"runbook corpus not found at {RUNBOOKS}")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        assert row["kind"] in {"answerable", "off_topic"} and row["query"].strip()
        assert bool(row["relevant"]) == (row["kind"] == "answerable"), row["id"]
        assert all((RUNBOOKS / source).is_file() for source in row["relevant"]), row["id"]
