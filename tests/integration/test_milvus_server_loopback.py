"""
`knowledge dev milvus-server` reachable on loopback only: every listening socket of its process
tree in this host's network is on 127.0.0.1, and the Milvus binary (which listens on every
interface of its network) runs in a network namespace whose only interface is `lo`.
"""

import os
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.helpers import child_env, cli_command
from tests.integration.serving_helpers import free_port, stop

pytestmark = pytest.mark.milvus_server

WILDCARDS = {"0.0.0.0", "::"}


@pytest.fixture
def dev_server(tmp_path):
    port = free_port()
    command = cli_command("dev", "milvus-server", "--port", str(port), "--data-dir", str(tmp_path / "milvus"))
    process = subprocess.Popen(
        command, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        ready = process.stdout.readline()  # the command prints one line once the server answers
        assert "Milvus server ready" in ready, ready
        yield process, port
    finally:
        stop(process)


def interfaces(pid: int) -> set[str]:
    """The network interfaces of a process's network namespace."""
    lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    return {line.split(":", 1)[0].strip() for line in lines}


def test_every_listener_of_the_dev_server_is_on_loopback(dev_server):
    process, port = dev_server
    tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    pids = {member.pid for member in tree}
    listening = [c for c in psutil.net_connections("inet") if c.pid in pids and c.status == psutil.CONN_LISTEN]
    assert ("127.0.0.1", port) in {(c.laddr.ip, c.laddr.port) for c in listening}
    assert not [c.laddr for c in listening if c.laddr.ip in WILDCARDS or not c.laddr.ip.startswith("127.")]
    ours = os.readlink("/proc/self/ns/net")
    [milvus] = [member for member in tree if member.name() == "milvus"]
    assert os.readlink(f"/proc/{milvus.pid}/ns/net") != ours
    assert interfaces(milvus.pid) == {"lo"}


def test_the_dev_server_answers_on_its_loopback_port(dev_server):
    from pymilvus import MilvusClient

    _process, port = dev_server
    client = MilvusClient(uri=f"http://127.0.0.1:{port}", timeout=30, dedicated=True)
    try:
        assert client.list_collections() == []
    finally:
        client.close()
