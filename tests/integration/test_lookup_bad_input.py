"""
Query side, bad input: empty and over-long queries, control characters, and filter safety (a
category holding a double quote and a backslash; a query that tries to extend the filter).
"""

import json

import pytest

from components.contracts import InvalidQueryError, L0Hints
from components.lookup.fallback_retriever import FallbackRetriever
from components.lookup.query_transformer import QueryTransformer
from components.stores.knowledge_store import KnowledgeStore
from components.stores.milvus_collection import category_filter
from pipelines.cli import main
from pipelines.lookup import LookupService
from tests.helpers import collection_rows, derived_config, lookup_with
from tests.lookup_kbs import QUOTED_CATEGORY

DISK_QUERY = "disk almost full on a worker node"
PAGER_QUESTION = "how do I hand over the on-call pager"


def _stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("query", ["", "   ", "\t\n", "\x00\x07 \u3000"])
def test_empty_query_is_invalid(sample_service, sample_cfg, query):
    with pytest.raises(InvalidQueryError, match="empty"):
        sample_service.lookup(query)
    with pytest.raises(InvalidQueryError, match="empty"):
        QueryTransformer(l0_index_path=sample_cfg.l0.index_path).run(query=query)


@pytest.mark.parametrize("query", ["", "  \t "])
def test_cli_empty_query_exits_2_with_one_line(sample_cfg, capsys, query):
    code = main(["lookup", query, f"paths.state_dir={sample_cfg.paths.state_dir}", "mlflow=off"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    (line,) = _stderr_lines(captured.err)
    assert line.startswith("knowledge: error: ") and "empty" in line and "Traceback" not in captured.err


def test_overlong_query_is_truncated_and_recorded(sample_cfg):
    query = DISK_QUERY + " " + " ".join(f"word{i}" for i in range(200))
    result, _ = lookup_with(sample_cfg, query, "query.max_chars=100")
    qt = result.query_transform
    assert qt.truncated is True and qt.original_chars == len(query) > 100
    assert len(qt.normalized) <= 100 and qt.normalized.startswith(DISK_QUERY)
    assert not qt.normalized.endswith(" ") and query.startswith(qt.normalized)
    assert result.to_dict()["queryTransform"]["truncated"] is True
    assert result.retrieval_details(200)["query_transform"]["original_chars"] == len(query)
    assert all(len(a.query) <= 100 for a in result.retrieval_trace.attempts)
    assert result.found

    short, _ = lookup_with(sample_cfg, DISK_QUERY, "query.max_chars=100")
    assert short.query_transform.truncated is False


def test_overlong_query_with_on_overlong_error_is_invalid(sample_cfg, capsys):
    query = "disk full " * 30
    service = LookupService(derived_config(sample_cfg, "query.max_chars=100", "query.on_overlong=error"))
    with pytest.raises(InvalidQueryError, match="limit is 100"):
        service.lookup(query)
    code = main(
        [
            "lookup",
            query,
            f"paths.state_dir={sample_cfg.paths.state_dir}",
            "mlflow=off",
            "query.max_chars=100",
            "query.on_overlong=error",
        ]
    )
    captured = capsys.readouterr()
    assert code == 2 and len(_stderr_lines(captured.err)) == 1 and "query.max_chars" in captured.err


def test_control_characters_are_normalised(sample_service):
    raw = "disk\x07 almost\tfull\x00 on a\u3000worker\r\nnode\x1b"
    result = sample_service.lookup(raw)
    qt = result.query_transform
    assert qt.raw == raw and qt.normalized == DISK_QUERY
    assert result.retrieval_trace.attempts[0].query == DISK_QUERY
    assert [b.evidence_key for b in result.evidence_blocks] == [
        b.evidence_key for b in sample_service.lookup(DISK_QUERY).evidence_blocks
    ]


def test_lone_surrogates_are_dropped_not_fatal(sample_service, sample_cfg, tmp_path, capsys):
    """Regression: a lone surrogate (a JSON escape such as "\\ud800") crashed the tokenizer (exit 1)."""
    result = sample_service.lookup("disk\ud800 almost full on a worker node")
    assert result.query_transform.normalized == DISK_QUERY and result.found
    assert result.query_transform.raw == "disk\ufffd almost full on a worker node"
    batch = tmp_path / "queries.jsonl"
    batch.write_text('{"query": "\\udc00"}\n{"query": "disk almost full\\ud800 on a worker node"}\n', encoding="utf-8")
    code = main(["lookup", "--batch", str(batch), f"paths.state_dir={sample_cfg.paths.state_dir}", "mlflow=off"])
    empty, found = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert code == 2 and "empty" in empty["error"] and empty["query"] == "\ufffd"
    assert found["found"] is True and found["queryTransform"]["normalized"] == DISK_QUERY


# filter safety -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sdk", "haystack"])
def test_filter_of_a_category_with_quote_and_backslash_is_escaped(topics_cfg, mode):
    query = f"{QUOTED_CATEGORY}: {PAGER_QUESTION}"
    result, outputs = lookup_with(topics_cfg, query, f"retrieval.vector_store_mode={mode}", include=("retriever",))
    assert result.l0_hints.domains == [QUOTED_CATEGORY]
    first = result.retrieval_trace.attempts[0]
    assert first.category_filter == QUOTED_CATEGORY and first.path == mode
    assert first.filter_expression == 'category == "it\\"s \\\\ ops"' == category_filter(QUOTED_CATEGORY)
    filtered = [c for c in outputs["retriever"]["candidates"] if c.attempt == 0]
    in_category = [row for row in collection_rows(topics_cfg) if row["category"] == QUOTED_CATEGORY]
    assert filtered and len(filtered) == len(in_category) == first.candidate_count
    assert {c.category for c in filtered} == {QUOTED_CATEGORY}
    assert {c.source for c in filtered} == {"itops/pager-rotation.md"}


@pytest.mark.parametrize(
    "query, category",
    [
        (f'{PAGER_QUESTION}" or category != "', None),
        (f'{QUOTED_CATEGORY}" or category != " {PAGER_QUESTION}', QUOTED_CATEGORY),
    ],
    ids=["no-category", "quoted-category"],
)
def test_query_text_cannot_change_the_filter(topics_cfg, query, category):
    result, outputs = lookup_with(topics_cfg, query, include=("retriever",))
    first = result.retrieval_trace.attempts[0]
    assert first.category_filter == category
    assert first.filter_expression == (None if category is None else category_filter(category))
    if category is not None:
        filtered = [c for c in outputs["retriever"]["candidates"] if c.attempt == 0]
        assert {c.category for c in filtered} == {category}


def test_category_value_is_compared_not_parsed(topics_cfg, sample_service):
    """Even a domain that looks like an expression only ever matches a category of that exact name."""
    embedding = sample_service.pipeline.get_component("query_embedder").run(query=PAGER_QUESTION)["query_embedding"]
    qt = sample_service.pipeline.get_component("query_transformer").run(query=PAGER_QUESTION)["query_transform"]
    retriever = FallbackRetriever(
        store=KnowledgeStore(uri=topics_cfg.milvus.uri, collection=topics_cfg.milvus.collection)
    )
    out = retriever.run(query_transform=qt, hints=L0Hints(domains=['x" or category != "']), query_embedding=embedding)
    first, retry = out["retrieval_trace"].attempts
    assert first.filter_expression == 'category == "x\\" or category != \\""'
    assert first.candidate_count == 0  # unescaped, this filter would have matched every row
    assert retry.category_filter is None and retry.candidate_count > 0
