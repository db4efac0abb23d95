"""
`knowledge adapt` on a tiny run it cannot win (`guard.level=0`: no paired test is ever significant):
what it announces before training, and the not-recommended verdict, an answer (exit 0) printed once.
"""

import json
import re
import shutil

import pytest

from tests.conftest import SAMPLE_KB
from tests.helpers import run_cli, stderr_lines

SOURCES = ("disk/disk-full.md", "disk/inode-exhaustion.md", "database/postgresql-replication-lag.md")


@pytest.fixture(scope="module")
def unwinnable(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapt-unwinnable")
    kb = root / "kb"
    for source in SOURCES:
        (kb / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_KB / source, kb / source)
    guard = root / "guard.jsonl"
    guard.write_text("".join(json.dumps({"query": q, "relevant": []}) + "\n" for q in ("Nginx is down", "DNS fails")))
    output = root / "adapted"
    args = ["adapt", "--kb", str(kb), "--output", str(output), "--batch-size", "1", "--max-steps", "1"]
    state = [f"paths.state_dir={root / 'state'}", "mlflow=off"]
    done = run_cli(*args, "--guard", str(guard), "guard.sets=[]", "guard.level=0", *state, cwd=root, timeout=900)
    return done, output, state, root


def test_the_announcement_covers_the_verdict_with_its_counts(unwinnable):
    done, *_ = unwinnable
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    chunks = int(re.search(r"\((\d+) documents, (\d+) chunks\)", done.stdout).group(2))
    judging = next(line for line in lines if line.startswith("Judging base against adapted model on "))
    queries = sum(int(n) for n in re.findall(r"\((\d+)\)", judging))
    estimate = lines.index(next(line for line in lines if line.startswith("  estimated training time: ")))
    verdict = lines[estimate + 1]
    assert verdict.startswith(
        f"  then the verdict: base and adapted model each index {chunks} chunks and answer {queries} queries "
        "(two indexes): about "
    ), verdict
    assert verdict.endswith(" of embedding on this machine, plus the model loads and the searches")
    assert estimate < lines.index(judging)  # announced before the work, not after


def test_a_model_not_recommended_is_a_verdict_printed_once_and_its_folder_says_so(unwinnable):
    done, output, state, root = unwinnable
    assert done.returncode == 0 and "error:" not in done.stderr, done.stderr
    verdicts = [line for line in done.stdout.splitlines() if line.startswith("Verdict: ")]
    assert len(verdicts) == 1 and verdicts[0].startswith("Verdict: not recommended: "), done.stdout
    assert f"embedder.model={output} is not better" in verdicts[0]  # the folder the user gets, not the work folder
    assert f"The adapted model stays in {output}, marked as not recommended in its card" in done.stdout
    assert "Verdict: not recommended" in (output / "README.md").read_text(encoding="utf-8")

    shown = run_cli("lookup", "--cfg", f"embedder.model={output}", *state, cwd=root)
    assert shown.returncode == 0, shown.stderr
    reason = verdicts[0].removeprefix("Verdict: ")
    assert f"# embedder.model {output}: {reason}" in shown.stdout
    assert stderr_lines(shown) == [f"note: embedder.model {output} was judged by `knowledge adapt`: {reason}"]


def test_a_run_without_a_terminal_prints_no_progress_bar(unwinnable):
    done, *_ = unwinnable
    assert done.returncode == 0, done.stderr
    assert "Computing widget examples" not in done.stderr  # the trainer's model-card bar
    assert "\r" not in done.stderr, done.stderr  # no bar redraws a line in a log
