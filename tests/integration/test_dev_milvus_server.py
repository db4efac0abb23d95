"""
`knowledge dev milvus-server` as a real process: one server per data folder (a lock), bad
arguments refused in one line, SIGTERM ending the whole process tree (also while it starts), a
SIGKILL of the command ending it too, and a health line when Milvus stops answering. The Lite
engine starts in seconds; the 2.3 standalone is used where its slow start is the point.
"""

import os
import signal
import socket
import subprocess
import time

import psutil
import pytest

from tests.helpers import child_env, cli_command, run_cli, stderr_lines
from tests.integration.serving_helpers import free_port, stop

READY_TIMEOUT_S = 120.0


def start_dev_server(data_dir, *extra: str, engine: str = "lite") -> tuple[subprocess.Popen, int]:
    port = free_port()
    args = ["dev", "milvus-server", "--engine", engine, "--port", str(port), "--data-dir", str(data_dir), *extra]
    process = subprocess.Popen(
        cli_command(*args),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return process, port


def wait_ready(process: subprocess.Popen) -> str:
    ready = process.stdout.readline()  # the command prints one line once the server answers
    assert "Milvus server ready" in ready, ready + process.stderr.read()
    return ready


def process_tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def all_gone(processes: list[psutil.Process], timeout_s: float = 30.0) -> list[psutil.Process]:
    """The processes still alive after `timeout_s` (none when the tree ended)."""
    _gone, alive = psutil.wait_procs(processes, timeout=timeout_s)
    return alive


@pytest.fixture
def lite_dev_server(tmp_path):
    process, port = start_dev_server(tmp_path / "milvus")
    try:
        wait_ready(process)
        yield process, port, tmp_path / "milvus"
    finally:
        stop(process)


def test_a_second_server_on_the_same_data_folder_is_refused_at_once(lite_dev_server):
    _process, _port, data_dir = lite_dev_server
    started = time.monotonic()
    done = run_cli("dev", "milvus-server", "--engine", "lite", "--port", str(free_port()), "--data-dir", str(data_dir))
    assert done.returncode == 2 and time.monotonic() - started < 60, done.stderr
    [line] = stderr_lines(done)
    assert f"--data-dir {data_dir} is in use by another Milvus dev server" in line


@pytest.mark.parametrize("engine", ["lite", "standalone"])
def test_a_busy_port_exits_2_with_one_line(tmp_path, engine):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_cli("dev", "milvus-server", "--engine", engine, "--port", str(port), "--data-dir", str(tmp_path))
    assert done.returncode == 2, done.stderr
    [line] = stderr_lines(done)
    assert f"--port {port} is busy on 127.0.0.1" in line


def test_sigterm_ends_the_command_the_server_and_every_child(lite_dev_server):
    process, _port, _data_dir = lite_dev_server
    tree = process_tree(process.pid)
    assert len(tree) >= 2  # the command and the Lite server
    os.kill(process.pid, signal.SIGTERM)  # the command only, as a service manager does
    assert all_gone(tree) == []


@pytest.mark.milvus_server
def test_sigterm_while_the_standalone_starts_leaves_nothing_running(tmp_path):
    process, _port = start_dev_server(tmp_path / "milvus", engine="standalone")
    try:
        deadline = time.monotonic() + 60
        tree = process_tree(process.pid)
        while not any(member.name() == "milvus" for member in tree) and time.monotonic() < deadline:
            time.sleep(0.2)  # until the Milvus binary runs: the server is starting, not ready
            tree = process_tree(process.pid)
        assert any(member.name() == "milvus" for member in tree), [member.name() for member in tree]
        os.kill(process.pid, signal.SIGTERM)
        assert all_gone(tree) == []
    finally:
        stop(process)


@pytest.mark.parametrize("engine", ["lite", pytest.param("standalone", marks=pytest.mark.milvus_server)])
def test_sigkill_leaves_nothing_running_and_a_restart_on_another_port_works(tmp_path, engine):
    data_dir = tmp_path / "milvus"
    process, port = start_dev_server(data_dir, engine=engine)
    try:
        wait_ready(process)
        tree = process_tree(process.pid)
        assert len(tree) >= 2  # the command and its server
        os.kill(process.pid, signal.SIGKILL)  # the command only: nothing of it runs its clean-up
        assert all_gone(tree, timeout_s=15.0) == []
    finally:
        stop(process)
    again, other_port = start_dev_server(data_dir, engine=engine)
    try:
        assert other_port != port
        wait_ready(again)
    finally:
        stop(again)


def test_a_health_line_when_milvus_stops_answering_and_when_it_is_back(lite_dev_server):
    process, port, _data_dir = lite_dev_server
    [milvus] = [member for member in process_tree(process.pid) if "milvus_lite" in " ".join(member.cmdline())]
    milvus.suspend()  # SIGSTOP: the process lives, the port accepts, nothing answers
    try:
        line = process.stderr.readline()
    finally:
        milvus.resume()
    # DEADLINE_EXCEEDED, or a failed connection when the probe had none open yet.
    assert f"Milvus server at http://127.0.0.1:{port} stopped answering (" in line, line
    assert "answers again" in process.stderr.readline()
