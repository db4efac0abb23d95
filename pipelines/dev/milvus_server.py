"""
A local Milvus standalone server (PyPI `milvus`, embedded etcd and storage) in its own process
group, for tests and trials of the server path: started on a free loopback port with its data in a
folder of your choice, ready when it answers, always stopped as a group (see docs/milvus.md).

Usage example:

```python
with MilvusServerProcess(tmp_path / "milvus") as server:
    cfg = load_config([f"milvus.uri={server.uri}"])
```
"""

import argparse
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 180.0
STOP_GRACE_S = 5.0


class MilvusServerUnavailableError(RuntimeError):
    """The `milvus` package is missing, or its server did not start."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


class MilvusServerProcess:
    """A Milvus standalone server in a child process group; `uri` is where to reach it."""

    def __init__(self, data_dir: str | Path, port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self._process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> "MilvusServerProcess":
        try:
            import milvus  # noqa: F401  (only to fail early and clearly)
        except ImportError as exc:
            raise MilvusServerUnavailableError(
                "the `milvus` package is not installed (pip install milvus==2.3.5)"
            ) from exc
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "server-child.log", "ab")  # noqa: SIM115 (kept open for the child)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "pipelines.dev.milvus_server", "--child", str(self.data_dir), str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() kills the server binary with it
        )
        log.close()
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        from pymilvus import MilvusClient

        deadline = time.monotonic() + timeout_s
        last_error = "the port does not answer"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self.stop()
                raise MilvusServerUnavailableError(f"Milvus server exited early; see {self.data_dir}/server-child.log")
            if _answers(self.port):
                try:
                    # A connection of its own: a shared one of this process may still point at the
                    # previous run of the server (after `restart`) and never recover.
                    probe = MilvusClient(uri=self.uri, timeout=5, dedicated=True)
                    try:
                        probe.list_collections()
                    finally:
                        probe.close()
                except Exception as exc:  # not ready yet: any failure means "try again"
                    last_error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                else:
                    logger.info("Milvus server ready at %s", self.uri)
                    return
            time.sleep(0.5)
        self.stop()
        raise MilvusServerUnavailableError(
            f"Milvus server not ready at {self.uri} within {timeout_s:.0f} s (last: {last_error})"
        )

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to the group, SIGKILL after a grace period: the server binary ignores SIGTERM for long."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)

    def restart(self, timeout_s: float = READY_TIMEOUT_S) -> "MilvusServerProcess":
        """Stop, then start again on the same port and data folder (its collections kept)."""
        self.stop()
        return self.start(timeout_s)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> "MilvusServerProcess":
        return self.start()

    def __exit__(self, *_exc_info) -> None:
        self.stop()


def _bind_probe_reusing_address(port: int) -> socket.socket | None:
    """
    The `milvus` package's free-port probe, with SO_REUSEADDR as the server binary itself binds.
    Without it, a restart on the same port finds the port "taken" by the previous run's closed
    connections (TIME_WAIT, up to a minute) and silently moves the server to the next port.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen()
    except OSError:
        sock.close()
        return None
    return sock


def _run_child(data_dir: str, port: int) -> None:
    from milvus import MilvusServer

    server = MilvusServer()
    server.config.try_bind_port = _bind_probe_reusing_address
    server.set_base_dir(data_dir)
    server.listen_port = port
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: (server.stop(), sys.exit(0)))
    while server.server_proc is not None and server.server_proc.poll() is None:
        time.sleep(0.5)


def serve_until_interrupted(data_dir: Path, port: int | None) -> int:
    """`knowledge dev milvus-server`: run a server in the foreground until Ctrl+C (or SIGTERM)."""

    def interrupted(*_args) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the server group as Ctrl+C does, never orphaning it

    signal.signal(signal.SIGTERM, interrupted)
    with MilvusServerProcess(data_dir, port) as server:
        print(f"Milvus server ready: milvus.uri={server.uri} (data in {data_dir}); Ctrl+C stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while server._process is not None and server._process.poll() is None:
                time.sleep(1)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2, metavar=("DATA_DIR", "PORT"), required=True)
    args = parser.parse_args()
    _run_child(args.child[0], int(args.child[1]))
