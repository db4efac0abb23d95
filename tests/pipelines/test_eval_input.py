"""`knowledge eval` on a query file that is not UTF-8: one line naming the file and line, exit 2."""

from tests.helpers import run_cli, stderr_lines


def test_bad_utf8_in_the_query_file_names_file_and_line_and_exits_2(tmp_path):
    queries = tmp_path / "queries.jsonl"
    queries.write_bytes(b'{"query": "disk full", "relevant": ["disk/disk-full.md"]}\n{"query": "caf\xe9 \xff"}\n')
    done = run_cli("eval", "--queries", str(queries), f"paths.state_dir={tmp_path / 'state'}", "mlflow=off")
    assert done.returncode == 2
    assert stderr_lines(done) == [f"knowledge: error: {queries}:2: not UTF-8 text (byte 0xe9)"]
