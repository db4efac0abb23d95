"""`knowledge index` says what it does on stderr when that is no terminal: a start line and a done line with counts."""

import re

from tests.helpers import run_cli, stderr_lines


def test_an_index_without_a_terminal_says_what_it_does_and_what_it_did(small_kb, tmp_path):
    done = run_cli("index", "--kb", str(small_kb), f"paths.state_dir={tmp_path / 'state'}", "mlflow=off", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    start, end = stderr_lines(done)  # no bar: stderr is a pipe here
    assert start == (
        f"indexing {small_kb} into collection knowledge incrementally: unchanged documents are skipped ..."
    )
    written = re.search(r"chunks written (\d+),", done.stdout).group(1)  # the report stays on stdout
    assert end.startswith("indexed in ") and end.endswith(
        f": 4 documents read (0 skipped), 4 embedded, {written} chunks written, 0 deleted"
    ), end
