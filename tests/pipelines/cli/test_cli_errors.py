"""
Exit statuses of every command through `pipelines.cli.main`: 0 on success, 2 on bad input,
1 on any other failure, each failure as exactly one stderr line and no traceback. `bench` runs on
a corpus of a few files written here; `serve` exits 0 only when stopped, so its refusals are here
and its running server in tests/integration/test_serve.py.
"""

import json
from pathlib import Path

import pytest

from components.common.embedding_models import ModelNotFoundError
from components.contracts import InvalidQueryError
from components.errors import BadInputError, KnowledgeError, KnowledgeFailure, exit_code_of, first_line
from components.indexing.markdown_reader import KnowledgeBaseError
from components.stores.l0_index_file import L0IndexMissingError
from components.stores.milvus_errors import CollectionMismatchError, MilvusUnavailableError
from components.tracing.trace_store import TraceStoreError
from pipelines.cli import UsageError, main
from pipelines.config.settings import ConfigError
from pipelines.evaluation.queries import EvaluationInputError
from pipelines.serving.bind import API_KEY_ENV

DISK_QUERY = "disk almost full on a worker node"


def run(capsys, *argv: str) -> tuple[int, str, list[str]]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, [line for line in captured.err.splitlines() if line.strip()]


def sample_args(sample_cfg, *extra: str) -> list[str]:
    return [f"paths.state_dir={sample_cfg.paths.state_dir}", "mlflow=off", *extra]


@pytest.fixture
def a_file(tmp_path) -> Path:
    """A plain file: any path below it cannot be created, an OSError nobody anticipates."""
    path = tmp_path / "a-file"
    path.write_text("not a folder")
    return path


def assert_one_error_line(lines: list[str], expected: str) -> None:
    assert lines == [f"knowledge: error: {expected}"]


@pytest.mark.parametrize(
    ("error", "branch"),
    [
        (InvalidQueryError, BadInputError),
        (KnowledgeBaseError, BadInputError),
        (ConfigError, BadInputError),
        (UsageError, BadInputError),
        (ModelNotFoundError, BadInputError),
        (L0IndexMissingError, BadInputError),
        (EvaluationInputError, BadInputError),
        (CollectionMismatchError, BadInputError),
        (MilvusUnavailableError, KnowledgeFailure),
        (TraceStoreError, KnowledgeFailure),
    ],
)
def test_every_error_class_sits_in_one_branch(error, branch):
    assert issubclass(error, branch) and issubclass(error, KnowledgeError)
    assert exit_code_of(error("x")) == (2 if branch is BadInputError else 1)


def test_l0_index_missing_is_still_a_file_not_found_error():
    assert issubclass(L0IndexMissingError, FileNotFoundError)


def test_unexpected_errors_exit_1():
    assert exit_code_of(RuntimeError("boom")) == 1 and exit_code_of(OSError("disk")) == 1


def test_first_line_skips_blank_lines_and_names_the_type_of_an_empty_message():
    assert first_line(ValueError("\n  first \nsecond")) == "first"
    assert first_line(RuntimeError()) == "RuntimeError"
    assert first_line(KeyError("")) == "''"


# --- index ------------------------------------------------------------------------------------------


def test_index_exit_0(capsys, tmp_path, small_kb):
    code, out, err = run(capsys, "index", "--kb", str(small_kb), f"paths.state_dir={tmp_path}", "mlflow=off")
    assert code == 0 and out.startswith(f"Indexed {small_kb}")
    assert len(err) == 2 and err[0].startswith("indexing ") and err[1].startswith("indexed in "), err


def test_index_missing_kb_exit_2(capsys, tmp_path):
    missing = tmp_path / "nope"
    code, out, err = run(capsys, "index", "--kb", str(missing), f"paths.state_dir={tmp_path}", "mlflow=off")
    assert code == 2 and out == ""
    assert_one_error_line(err, f"knowledge base {missing} does not exist (give one with --kb DIR)")


def test_index_unwritable_store_exit_1(capsys, tmp_path, small_kb, a_file):
    code, out, err = run(
        capsys, "index", "--kb", str(small_kb), f"paths.state_dir={tmp_path}", "mlflow=off", f"milvus.uri={a_file}/m.db"
    )
    assert code == 1 and out == ""
    assert_one_error_line(err, f"[Errno 17] File exists: '{a_file}'")


# --- lookup -----------------------------------------------------------------------------------------


def test_lookup_exit_0(capsys, sample_cfg):
    code, out, err = run(capsys, "lookup", DISK_QUERY, *sample_args(sample_cfg))
    assert code == 0 and json.loads(out)["found"] is True and err == []


def test_lookup_unknown_model_exit_2(capsys, sample_cfg):
    code, out, err = run(capsys, "lookup", DISK_QUERY, *sample_args(sample_cfg, "embedder.model=packaged:nope"))
    assert code == 2 and out == ""
    assert_one_error_line(err, "unknown packaged model 'nope'; packaged: all-MiniLM-L6-v2")


def test_lookup_bad_config_value_exit_2(capsys, sample_cfg):
    code, out, err = run(capsys, "lookup", DISK_QUERY, *sample_args(sample_cfg, "retrieval.top_k=0"))
    assert code == 2 and out == ""
    assert_one_error_line(err, "retrieval.top_k=0: must be at least 1")


def test_lookup_store_failure_exit_1(capsys, sample_cfg, a_file):
    code, out, err = run(capsys, "lookup", DISK_QUERY, *sample_args(sample_cfg, f"milvus.uri={a_file}/m.db"))
    result = json.loads(out)
    assert code == 1 and result["evidenceStatus"] == "error"
    assert_one_error_line(
        err,
        f"Knowledge lookup failed in retriever: [Errno 17] File exists: '{a_file}' "
        f"(invocation {result['invocationId']})",
    )


def test_debug_adds_the_traceback_before_the_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KNOWLEDGE_DEBUG", "1")
    code, _, err = run(capsys, "index", "--kb", str(tmp_path / "nope"), f"paths.state_dir={tmp_path}", "mlflow=off")
    assert code == 2 and err[0].startswith("Traceback") and err[-1].startswith("knowledge: error: knowledge base")


# --- eval -------------------------------------------------------------------------------------------


@pytest.fixture
def queries_file(tmp_path) -> Path:
    path = tmp_path / "queries.jsonl"
    rows = [{"query": DISK_QUERY, "relevant": ["disk/disk-full.md"]}, {"query": "best pizza in town", "relevant": []}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_eval_exit_0(capsys, sample_cfg, queries_file):
    code, out, err = run(capsys, "eval", "--queries", str(queries_file), "--no-baselines", *sample_args(sample_cfg))
    assert code == 0 and "hit@1" in out and err == []


def test_eval_missing_queries_exit_2(capsys, sample_cfg, tmp_path):
    missing = tmp_path / "missing.jsonl"
    code, out, err = run(capsys, "eval", "--queries", str(missing), *sample_args(sample_cfg))
    assert code == 2 and out == ""
    assert_one_error_line(err, f"cannot read {missing}: No such file or directory")


def test_eval_unwritable_details_exit_1(capsys, sample_cfg, queries_file, a_file):
    argv = ["eval", "--queries", str(queries_file), "--no-baselines", "--details", f"{a_file}/details.jsonl"]
    code, _, err = run(capsys, *argv, *sample_args(sample_cfg))
    assert code == 1
    assert_one_error_line(err, f"[Errno 20] Not a directory: '{a_file}/details.jsonl'")


# --- bench ------------------------------------------------------------------------------------------


RUNBOOK_SECTIONS = {
    "disk/volume-full.md": ["Meaning", "Impact", "Mitigation"],
    "network/receive-errors.md": ["Meaning", "Diagnosis"],
    "database/replica-behind.md": ["Meaning", "Mitigation"],
}
# Tiny sizes: the bench runs end to end in seconds; its figures mean nothing at this size.
TINY_BENCH = ["--min-chunks", "5"]
UNREACHABLE_MILVUS = ["milvus.uri=http://127.0.0.1:1", "milvus.timeout_ms=500"]


@pytest.fixture(scope="module")
def bench_corpus(tmp_path_factory) -> Path:
    """A few markdown runbooks, one chunk per section."""
    corpus = tmp_path_factory.mktemp("bench-corpus")
    for relative, sections in RUNBOOK_SECTIONS.items():
        path = corpus / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        title = path.stem.replace("-", " ")
        body = [f"# {title}", ""]
        for section in sections:
            body += [f"## {section}", "", f"{section} of {title}: what an operator checks and does first.", ""]
        path.write_text("\n".join(body), encoding="utf-8")
    return corpus


def test_bench_index_exit_0(capsys, tmp_path, bench_corpus):
    argv = ["bench", "index", "--corpus", str(bench_corpus), *TINY_BENCH, f"paths.state_dir={tmp_path}", "mlflow=off"]
    code, out, err = run(capsys, *argv)
    assert code == 0 and "chunks/s" in out and "ratio" in out and err == []
    assert not any(tmp_path.iterdir())  # the bench state lives in its own temporary folder


def test_bench_index_unreachable_milvus_exit_1(capsys, tmp_path, bench_corpus):
    argv = ["bench", "index", "--corpus", str(bench_corpus), *TINY_BENCH, f"paths.state_dir={tmp_path}"]
    code, _, err = run(capsys, *argv, "mlflow=off", *UNREACHABLE_MILVUS)
    assert code == 1
    assert len(err) == 1 and err[0].startswith("knowledge: error: cannot open Milvus at http://127.0.0.1:1")


def test_bench_bad_override_exit_2_before_any_work(capsys, tmp_path, bench_corpus):
    argv = ["bench", "lookup", "--corpus", str(bench_corpus), *TINY_BENCH, f"paths.state_dir={tmp_path}"]
    code, out, err = run(capsys, *argv, "retrieval.top_k=0")
    assert code == 2 and out == ""
    assert_one_error_line(err, "retrieval.top_k=0: must be at least 1")


def test_bench_missing_corpus_exit_2(capsys, tmp_path):
    missing = tmp_path / "nope"
    code, out, err = run(capsys, "bench", "index", "--corpus", str(missing), f"paths.state_dir={tmp_path}")
    assert code == 2 and out == ""
    assert_one_error_line(err, f"benchmark corpus {missing} does not exist (give one with --corpus DIR)")


# --- compare ----------------------------------------------------------------------------------------


def test_compare_exit_0(capsys, sample_cfg, queries_file):
    code, out, err = run(capsys, "compare", "--queries", str(queries_file), "--json", *sample_args(sample_cfg))
    assert code == 0 and json.loads(out)["run_id"] is None and err == []


def test_compare_bad_top_k_exit_2(capsys, sample_cfg, queries_file):
    code, out, err = run(capsys, "compare", "--queries", str(queries_file), "--top-k", "0", *sample_args(sample_cfg))
    assert code == 2 and out == ""
    assert_one_error_line(err, "--top-k 0 must be 1 or more")


def test_compare_missing_queries_exit_2(capsys, sample_cfg, tmp_path):
    missing = tmp_path / "missing.jsonl"
    code, out, err = run(capsys, "compare", "--queries", str(missing), *sample_args(sample_cfg))
    assert code == 2 and out == ""
    assert_one_error_line(err, f"cannot read {missing}: No such file or directory")


def test_compare_unreachable_milvus_exit_1(capsys, sample_cfg, queries_file):
    code, out, err = run(
        capsys, "compare", "--queries", str(queries_file), *sample_args(sample_cfg, *UNREACHABLE_MILVUS)
    )
    assert code == 1 and out == ""
    assert len(err) == 1 and err[0].startswith("knowledge: error: cannot open Milvus at http://127.0.0.1:1")


# --- serve ------------------------------------------------------------------------------------------


def test_serve_beyond_loopback_without_api_key_exit_2(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    code, out, err = run(capsys, "serve", "--host", "0.0.0.0", f"paths.state_dir={tmp_path}", "mlflow=off")
    assert code == 2 and out == ""
    assert len(err) == 1 and err[0].startswith("knowledge: error: refusing to serve on 0.0.0.0 without an API key")


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["serve", "--workers", "2"], "Milvus Lite is one process per db file"),
        (["serve", "--workers", "0"], "--workers must be at least 1"),
        (["serve", "serve.max_concurrent_lookups=0"], "serve.max_concurrent_lookups must be at least 1"),
        (["serve", "--mcp", "--workers", "2", "milvus=server"], "an MCP session lives in one process"),
        (["bench", "serve", "--workers", "1,2"], "Milvus Lite is one process per db file"),
        (["bench", "serve", "--workers", "one,two"], "--workers takes counts like 1,2"),
    ],
)
def test_serve_workers_refusals_exit_2(capsys, tmp_path, argv, reason):
    code, out, err = run(capsys, *argv, f"paths.state_dir={tmp_path}", "mlflow=off")
    assert code == 2 and out == ""
    assert len(err) == 1 and reason in err[0], err


def test_serve_bad_override_exit_2(capsys, tmp_path):
    code, out, err = run(capsys, "serve", f"paths.state_dir={tmp_path}", "serve.port=0")
    assert code == 2 and out == ""
    assert_one_error_line(err, "serve.port=0: must be at least 1")


# --- traces -----------------------------------------------------------------------------------------


def test_traces_exit_0(capsys, sample_cfg, sample_service):
    sample_service.lookup("disk full")  # one recorded call: reading never creates the database
    code, _, err = run(capsys, "traces", "list", "--last", "1", *sample_args(sample_cfg))
    assert code == 0 and err == []


def test_traces_bad_status_exit_2(capsys, sample_cfg):
    code, out, err = run(capsys, "traces", "list", "--status", "bogus", *sample_args(sample_cfg))
    assert code == 2 and out == ""
    assert_one_error_line(err, "--status 'bogus' is not one of ok, error")


def test_traces_store_under_a_file_is_no_database_exit_2(capsys, sample_cfg, a_file):
    url = f"sqlite:///{a_file}/t.db"
    code, out, err = run(capsys, "traces", "list", *sample_args(sample_cfg, f"trace.db_url={url}"))
    assert code == 2 and out == ""
    assert len(err) == 1 and f"no trace database at {a_file}/t.db" in err[0]


def test_dev_milvus_server_bad_port_exit_2(capsys, tmp_path):
    code, _, err = run(capsys, "dev", "milvus-server", "--port", "70000", "--data-dir", str(tmp_path))
    assert code == 2 and len(err) == 1 and "--port 70000" in err[0]


def test_dev_milvus_server_unusable_data_dir_exit_2(capsys, a_file):
    code, _, err = run(capsys, "dev", "milvus-server", "--data-dir", str(a_file / "milvus"))
    assert code == 2 and len(err) == 1 and "Not a directory" in err[0] and "Traceback" not in err[0]


def test_dev_milvus_server_data_dir_on_a_file_exit_2(capsys, a_file):
    code, _, err = run(capsys, "dev", "milvus-server", "--engine", "lite", "--data-dir", str(a_file))
    assert code == 2 and err == [f"knowledge: error: --data-dir {a_file} is a file, not a folder"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--port", "99999"], "--port 99999 is not a TCP port (1-65535)"),
        (["serve", "serve.port=70000"], "serve.port=70000 is not a TCP port (1-65535)"),
        (["bench", "lookup", "--queries", "0"], "--queries 0 must be at least 1"),
        (["bench", "index", "--min-chunks", "0"], "--min-chunks 0 must be at least 1"),
        (["bench", "serve", "--clients", "0"], "--clients 0 must be at least 1"),
    ],
)
def test_out_of_range_numbers_exit_2_before_any_work(capsys, tmp_path, argv, message):
    """Regression: `serve --port 99999` started the server's set-up, `bench lookup --queries 0` indexed first."""
    code, _, err = run(capsys, *argv, f"paths.state_dir={tmp_path}")
    assert code == 2
    assert_one_error_line(err, message)


@pytest.mark.parametrize("uri", ["", "milvus.sqlite", "ftp://127.0.0.1:19530"])
def test_a_milvus_uri_pymilvus_cannot_open_exit_2(capsys, sample_cfg, uri):
    """Regression: an empty milvus.uri failed inside the retriever (exit 1) instead of as bad config."""
    code, out, err = run(capsys, "lookup", DISK_QUERY, *sample_args(sample_cfg, f"milvus.uri={uri}"))
    assert code == 2 and out == ""
    assert len(err) == 1 and f"milvus.uri={uri!r}: is neither a Milvus Lite file" in err[0]
