"""
`knowledge eval` on a query file that is not UTF-8 or names an unknown kind: one line naming the
file and line, exit 2. Reading a query file loads none of the retrieval stack.
"""

import subprocess
import sys

from tests.helpers import REPO, child_env, run_cli, stderr_lines

# What a command that only reads a query file (`knowledge labels import`) must not pay for.
RETRIEVAL_STACK = ("haystack", "pymilvus", "onnxruntime", "mlflow", "torch")


def test_bad_utf8_in_the_query_file_names_file_and_line_and_exits_2(tmp_path):
    queries = tmp_path / "queries.jsonl"
    queries.write_bytes(b'{"query": "disk full", "relevant": ["disk/disk-full.md"]}\n{"query": "caf\xe9 \xff"}\n')
    done = run_cli("eval", "--queries", str(queries), f"paths.state_dir={tmp_path / 'state'}", "mlflow=off")
    assert done.returncode == 2
    assert stderr_lines(done) == [f"knowledge: error: {queries}:2: not UTF-8 text (byte 0xe9)"]


def test_an_unknown_kind_names_file_line_and_the_kinds_and_exits_2(tmp_path):
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        '{"query": "disk full", "relevant": ["disk/disk-full.md"]}\n{"query": "lunch menu", "kind": "offtopic"}\n',
        encoding="utf-8",
    )
    done = run_cli("eval", "--queries", str(queries), f"paths.state_dir={tmp_path / 'state'}", "mlflow=off")
    assert done.returncode == 2
    assert stderr_lines(done) == [
        f"knowledge: error: {queries}:2: unknown kind 'offtopic': the kinds are answerable, off_topic"
    ]


def test_every_known_kind_loads(tmp_path):
    from pipelines.evaluation.queries import load_queries

    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        '{"query": "a", "relevant": ["x.md"], "kind": "answerable"}\n{"query": "b", "kind": "off_topic"}\n'
        '{"query": "c"}\n',
        encoding="utf-8",
    )
    assert [q.kind for q in load_queries(queries)] == ["answerable", "off_topic", "off_topic"]


def test_reading_a_query_file_loads_no_retrieval_stack():
    script = (
        "import sys\n"
        "from pipelines.evaluation.queries import load_queries\n"
        "assert load_queries('eval/prometheus-dev.jsonl')\n"
        f"print(' '.join(m for m in {RETRIEVAL_STACK!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
