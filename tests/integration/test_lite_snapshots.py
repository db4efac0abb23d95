"""
Snapshot copies of a Milvus Lite db that another process holds (pipelines/state/lite_snapshot.py): the
copy a killed `knowledge eval` leaves is removed by the next run, SIGTERM removes its own copy, and
a copy that cannot be written is one line naming the folder and the cause.
"""

import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import EVAL_DIR
from tests.helpers import REPO, child_env, cli_command, run_main, stderr_lines
from tests.integration.serving_helpers import copy_state, stop

QUERIES = str(EVAL_DIR / "sample-kb.jsonl")
# What `knowledge serve` does to the store, without a server: open the Lite db and keep it.
HOLD = (
    "import sys, time\n"
    "from components.stores.milvus_collection import connect\n"
    "connect(sys.argv[1])\n"
    "print('held', flush=True)\n"
    "time.sleep(3600)\n"
)


@pytest.fixture(scope="module")
def held_state(served_index, tmp_path_factory):
    """A copy of the indexed state whose Lite db another process holds for the module."""
    state = copy_state(served_index, tmp_path_factory, "held")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(state / "milvus.db")],
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield state
    finally:
        stop(holder)


def _options(state) -> list[str]:
    return [f"paths.state_dir={state}", "mlflow=off", "guard.sets=[]"]


def _eval_holding_its_copy(state) -> subprocess.Popen:
    """A `knowledge eval` child, returned once it says it reads its snapshot copy."""
    command = cli_command("eval", "--queries", QUERIES, "--no-baselines", *_options(state))
    child = subprocess.Popen(command, cwd=REPO, env=child_env(), stderr=subprocess.PIPE, text=True)
    for line in child.stderr:
        if "reading a snapshot copy" in line:
            return child
    child.wait(timeout=60)
    raise AssertionError(f"eval exited {child.returncode} without taking a snapshot copy")


def _copies(state) -> list:
    folder = state / "lite-snapshots"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_the_copy_of_a_killed_eval_is_removed_by_the_next_run(held_state, capsys):
    child = _eval_holding_its_copy(held_state)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    [left] = _copies(held_state)
    assert left.name.startswith(f"snapshot-{child.pid}-") and (left / "milvus.db").is_dir()

    done = run_main(capsys, "eval", "--queries", QUERIES, "--no-baselines", *_options(held_state))
    assert done.returncode == 0, done.stderr
    assert _copies(held_state) == []


def test_sigterm_removes_the_copy_of_its_own_eval(held_state):
    child = _eval_holding_its_copy(held_state)
    assert len(_copies(held_state)) == 1
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM
    assert _copies(held_state) == []


def _file_where_the_folder_goes(state):
    target = state / "lite-snapshots"
    if target.is_dir():
        target.rmdir()  # empty: every copy is removed
    target.write_text("not a folder\n", encoding="utf-8")
    return target, str(target), "File exists"


def _a_file_copy_cannot_read(state):
    pipe = state / "milvus.db" / "stray.fifo"  # copytree fails on it and goes on: a list of failures
    os.mkfifo(pipe)
    return pipe, str(state / "lite-snapshots" / "snapshot-"), "is a named pipe"


@pytest.mark.parametrize("fault", [_file_where_the_folder_goes, _a_file_copy_cannot_read], ids=["file", "fifo"])
def test_a_copy_that_cannot_be_written_is_one_line_naming_the_folder_and_the_cause(held_state, capsys, fault):
    made, folder, cause = fault(held_state)
    try:
        failed = run_main(capsys, "eval", "--queries", QUERIES, "--no-baselines", *_options(held_state))
    finally:
        made.unlink()
    assert failed.returncode == 1
    [line] = stderr_lines(failed)
    assert "cannot take a snapshot copy of the Milvus Lite database" in line and "Traceback" not in failed.stderr
    assert f" in {folder}" in line and cause in line
    assert _copies(held_state) == []
