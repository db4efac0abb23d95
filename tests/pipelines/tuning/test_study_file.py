"""
The Optuna study file (`optuna.db`) and interrupted searches: a damaged file is named with what to
do (exit 2, before any trial), a locked one as busy with the process that has it; Ctrl+C stops a
search with one line saying how to resume, and the resumed search reads like a fresh one.
"""

import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from pipelines.cli import main
from tests.conftest import EVAL_DIR, sample_overrides
from tests.helpers import REPO, child_env, cli_command, run_main, stderr_lines
from tests.integration.serving_helpers import copy_state

DATA = Path(__file__).parent.parent / "data"


def test_a_damaged_study_file_is_named_with_what_to_do(sample_cfg, tmp_path, capsys):
    study_file = tmp_path / "optuna.db"
    study_file.write_bytes(b"SQLite format 3\x00" + b"\xde\xad" * 4000)  # a header, then garbage
    overrides = sample_overrides(sample_cfg, f"paths.state_dir={tmp_path}", "mlflow=off")
    argv = ["eval", "--queries", str(EVAL_DIR / "sample-kb.jsonl"), "--guard", str(DATA / "offtopic-sample.jsonl")]
    code = main([*argv, "--search", str(DATA / "guarded-space.yaml"), "--trials", "1", *overrides])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"the study file {study_file} is damaged" in err and "move it away" in err


# Another process in the middle of a write: what a second search holds while it stores a trial.
LOCK = (
    "import sqlite3, sys, time\n"
    "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "db.execute('CREATE TABLE IF NOT EXISTS held (x)')\n"
    "db.execute('BEGIN EXCLUSIVE')\n"
    "print('locked', flush=True)\n"
    "time.sleep(600)\n"
)


def test_a_locked_study_file_is_busy_naming_the_process_not_damaged(sample_cfg, tmp_path, capsys):
    study_file = tmp_path / "optuna.db"
    holder = subprocess.Popen([sys.executable, "-c", LOCK, str(study_file)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        overrides = sample_overrides(sample_cfg, f"paths.state_dir={tmp_path}", "mlflow=off")
        argv = ["eval", "--queries", str(EVAL_DIR / "sample-kb.jsonl"), "--guard", str(DATA / "offtopic-sample.jsonl")]
        code = main([*argv, "--search", str(DATA / "guarded-space.yaml"), "--trials", "1", *overrides])
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.count("\n") == 1 and "Traceback" not in err and "damaged" not in err
    assert f"the study file {study_file} is busy" in err and f"pid {holder.pid} (" in err
    assert "wait for it to finish" in err and "--study-file FILE" in err


def _search(state: Path, study: str, *extra: str) -> list[str]:
    return [
        "eval",
        "--queries",
        str(EVAL_DIR / "sample-kb.jsonl"),
        "--guard",
        str(DATA / "offtopic-sample.jsonl"),
        "--search",
        "thresholds",  # the current settings lie in its space: they are the first trial
        "--study",
        study,
        *extra,
        f"paths.state_dir={state}",
        "mlflow=off",
        "guard.sets=[]",
    ]


def _as_a_terminal_job() -> None:
    """
    Ctrl+C reaches a terminal's foreground job: SIGINT handled by default and not blocked. A process of
    the test run may ignore or block it, and a child inherits both across exec; Python then installs no
    KeyboardInterrupt handler and the search would finish as if never interrupted.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _interrupt_while_running(command: list[str], study_file: Path, study: str) -> subprocess.CompletedProcess:
    """Run `command` and send it SIGINT while a trial of `study` runs (the first: the current settings)."""
    child = subprocess.Popen(
        command, cwd=REPO, env=child_env(), stderr=subprocess.PIPE, text=True, preexec_fn=_as_a_terminal_job
    )
    # The first trial is enqueued (WAITING) and then runs: either state is "while a trial runs" for the count.
    running = (
        "SELECT count(*) FROM trials JOIN studies USING (study_id) "
        "WHERE study_name = ? AND state IN ('WAITING', 'RUNNING')"
    )
    deadline = time.monotonic() + 300
    while child.poll() is None and time.monotonic() < deadline:
        try:
            with closing(sqlite3.connect(f"file:{study_file}?mode=ro", uri=True, timeout=1)) as db:
                if db.execute(running, (study,)).fetchone()[0]:
                    break
        except sqlite3.Error:  # not created yet
            pass
        time.sleep(0.02)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    return subprocess.CompletedProcess(command, child.returncode, "", err)


def _set_rows(output: str) -> list[tuple[str, str, str]]:
    """(set, role, setting) of every row of the summary's `best vs defaults` table."""
    table = output.split("best vs defaults", 1)[1].splitlines()[2:]
    rows = [tuple(line.split()[:3]) for line in table if line.startswith("  ") and len(line.split()) > 3]
    return [row for row in rows if row[1] in ("tuning", "guard", "held-out")]


def test_ctrl_c_during_a_search_is_one_line_and_the_resumed_search_reads_like_a_fresh_one(
    served_index, tmp_path_factory, capsys
):
    state = copy_state(served_index, tmp_path_factory, "interrupted-search")
    interrupted = _interrupt_while_running(
        cli_command(*_search(state, "cut", "--trials", "5")), state / "optuna.db", "cut"
    )
    assert interrupted.returncode == 130, interrupted.stderr
    assert "Traceback" not in interrupted.stderr and "failed with" not in interrupted.stderr
    last = stderr_lines(interrupted)[-1]
    assert "search interrupted: 0 of 5 trials finished (study cut in" in last
    assert last.endswith("resume it with --study cut --resume")

    resumed = run_main(capsys, *_search(state, "cut", "--trials", "1", "--resume"))
    fresh = run_main(capsys, *_search(state, "fresh", "--trials", "1"))
    assert resumed.returncode == fresh.returncode, resumed.stderr
    assert "(current)" in resumed.stdout and "(current)" in fresh.stdout
    rows = _set_rows(fresh.stdout)
    assert ("offtopic-sample", "guard", "default") in rows
    assert _set_rows(resumed.stdout) == rows


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(
    ("interrupted_run", "finished"),
    [(1, 0), (3, 1)],
    ids=["while-measuring-the-current-settings", "while-a-trial-runs"],
)
def test_a_ctrl_c_a_library_swallowed_still_ends_the_search_before_the_trial_is_recorded(
    interrupted_run, finished, served_index, tmp_path_factory, capsys, monkeypatch
):
    """
    Evaluations 1 and 2 measure the current settings (the tuning part of the split with the guard
    set, then its held-out part), which trial 0 takes; evaluation 3 is trial 1's.
    """
    from pipelines.tuning import guards
    from tests.pipelines.config.test_interrupts import swallowed_sigint

    real, runs = guards.evaluate, []

    def evaluated_then_interrupted(*args, **kwargs):
        result = real(*args, **kwargs)
        runs.append(1)
        if len(runs) == interrupted_run:
            swallowed_sigint()  # as when SQLAlchemy's registry callback runs during garbage collection
        return result

    monkeypatch.setattr(guards, "evaluate", evaluated_then_interrupted)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        state = copy_state(served_index, tmp_path_factory, "swallowed-interrupt")
        interrupted = run_main(capsys, *_search(state, "cut", "--trials", "3"))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert interrupted.returncode == 130, interrupted.stderr
    last = stderr_lines(interrupted)[-1]
    assert f"search interrupted: {finished} of 3 trials finished (study cut in" in last
