"""Helpers of the serving tests: child-process environment, free ports, servers always stopped."""

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.helpers import REPO

START_TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def copy_state(indexed: Path, tmp_path_factory, name: str) -> Path:
    """A private copy of an indexed state folder: each server process needs its own Milvus Lite db."""
    target = tmp_path_factory.mktemp(name) / "state"
    shutil.copytree(indexed, target)
    return target


def stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=15)


@contextmanager
def running(command: list[str], ready_url: str, log_path: Path, env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """Start `command` in its own process group; yield once `ready_url` answers 200; always stop it."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise AssertionError(f"server exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(ready_url, timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"server not ready after {START_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield process
    finally:
        stop(process)


# Eight topics: one per concurrent client, each query made unique by its call number.
TOPICS = ["disk full", "replication lag", "certificate expiry", "high cpu", "memory leak", "dns", "inode", "oom"]


def concurrent_lookups(url: str, calls: int = 25, headers: dict | None = None) -> list[tuple[str, int, dict]]:
    """Eight clients at once, `calls` lookups each: (query, HTTP status, body) of every request."""

    def client(number: int) -> list[tuple[str, int, dict]]:
        answers = []
        with httpx.Client(headers=headers or {}, timeout=120.0) as http:
            for call in range(calls):
                query = f"{TOPICS[number]} {call}"
                response = http.post(f"{url}/lookup_knowledge/run", json={"query": query})
                answers.append((query, response.status_code, response.json()))
        return answers

    with ThreadPoolExecutor(max_workers=len(TOPICS)) as pool:
        return [answer for batch in pool.map(client, range(len(TOPICS))) for answer in batch]
