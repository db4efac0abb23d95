"""
A local Milvus standalone server (PyPI `milvus`, embedded etcd and storage) in its own process
group, for tests and trials of the server path: started on a free loopback port with its data in a
folder of your choice, ready when it answers, always stopped as a group (see docs/milvus.md).

The Milvus 2.3 binary listens on every interface (`:port`) for its gRPC, metrics and internal
ports, whatever its config says. So it runs in a network namespace of its own, whose only
interface is its own loopback, and a relay in that namespace forwards the one client port from a
socket the parent bound to 127.0.0.1: nothing of the server is reachable from another host.

Usage example:

```python
with MilvusServerProcess(tmp_path / "milvus") as server:
    cfg = load_config([f"milvus.uri={server.uri}"])
```
"""

import argparse
import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from components.errors import BadInputError, first_line
from pipelines.dev.watchdog import STOP_GRACE_S, Lifeline

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 180.0


LOCK_FILE = "knowledge-dev-server.lock"


class MilvusServerUnavailableError(RuntimeError):
    """The `milvus` package is missing, or its server did not start."""


class ServerArgumentError(MilvusServerUnavailableError, BadInputError):
    """The data folder or the port cannot be used as given (in use, not a folder): exit status 2."""


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
        self._watchdog: subprocess.Popen | None = None  # the leader of the server's process group
        self._lifeline: Lifeline | None = None
        self._lock: int | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> "MilvusServerProcess":
        self._check_installed()
        self._lock = lock_data_dir(self.data_dir)
        try:
            self._process = self._launch()
            self._wait_ready(timeout_s)
        except BaseException:
            # Also on Ctrl+C or SIGTERM while waiting: the server group never outlives its caller.
            self.stop()
            raise
        return self

    @staticmethod
    def _check_installed() -> None:
        try:
            import milvus  # noqa: F401  (only to fail early and clearly)
        except ImportError as exc:
            raise MilvusServerUnavailableError(
                "the `milvus` package is not installed (pip install milvus==2.3.5)"
            ) from exc

    def _launch(self) -> subprocess.Popen:
        isolate = network_namespace_command()
        listener = _loopback_listener(self.port)
        child = [sys.executable, "-m", "pipelines.dev.milvus_server", "--child", str(self.data_dir), str(self.port)]
        log = open(self.log_path, "ab")  # noqa: SIM115 (kept open for the child)
        try:
            return subprocess.Popen(
                [*isolate, *child, "--listen-fd", str(listener.fileno())],
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(listener.fileno(),),
                process_group=self._watched_group(log),  # stop() kills the server binary with the group
            )
        finally:
            log.close()
            listener.close()  # the child's relay owns it now: the port closes when the server goes

    def _watched_group(self, log) -> int:
        """
        A new process group led by a watchdog that ends it when this process ends, however it
        ends (`watchdog.py`): the server joins it, so a SIGKILL of the caller leaves no server behind.
        """
        self._lifeline = Lifeline()
        self._watchdog = self._lifeline.start_watchdog(log)
        return self._watchdog.pid

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server-child.log"

    def _wait_ready(self, timeout_s: float) -> None:
        from pymilvus import MilvusClient

        deadline = time.monotonic() + timeout_s
        last_error = "the port does not answer"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self.stop()
                raise MilvusServerUnavailableError(f"Milvus server exited early; see {self.log_path}")
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
                    last_error = first_line(exc)
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
        watchdog, self._watchdog = self._watchdog, None
        lock, self._lock = self._lock, None
        if watchdog is not None:
            _stop_group(watchdog.pid, process, grace_s)
            with contextlib.suppress(subprocess.TimeoutExpired):
                watchdog.wait(timeout=10)
        if self._lifeline is not None:
            self._lifeline.cut()
            self._lifeline = None
        if lock is not None:
            os.close(lock)  # the data folder is free again once the server is gone

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


def _stop_group(group: int, process: subprocess.Popen | None, grace_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def lock_data_dir(data_dir: Path) -> int:
    """
    Create the data folder and take its lock (a file descriptor, held while the server runs): a
    second server on the same folder is refused at once instead of waiting on Milvus's own locks.
    """
    if data_dir.exists() and not data_dir.is_dir():
        raise ServerArgumentError(f"--data-dir {data_dir} is a file, not a folder")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ServerArgumentError(f"--data-dir {data_dir} cannot be used as a folder: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(descriptor)
        raise ServerArgumentError(
            f"--data-dir {data_dir} is in use by another Milvus dev server (pid {holder}); stop it or pick another folder"
        ) from exc
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, str(os.getpid()).encode(), 0)
    return descriptor


def check_port_free(port: int) -> None:
    """Refuse a port something already listens on (SO_REUSEADDR, as servers bind: a restart's TIME_WAIT is no owner)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ServerArgumentError(f"--port {port} is busy on 127.0.0.1: {exc.strerror or exc}") from exc


@functools.cache
def network_namespace_command() -> tuple[str, ...]:
    """
    The command prefix that runs the server in a network namespace of its own (an unprivileged
    user namespace maps the caller to root there). Raises when this machine does not allow it: a
    server listening on every interface without auth is not started.
    """
    unshare = shutil.which("unshare")
    command = (unshare, "--net", "--map-root-user") if unshare else ()
    if command:
        probe = subprocess.run([*command, "true"], capture_output=True, text=True, check=False)
        if probe.returncode == 0:
            return command
        reason = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else f"exit {probe.returncode}"
    else:
        reason = "the `unshare` command (util-linux) is not installed"
    raise MilvusServerUnavailableError(
        "cannot keep the Milvus server off the network: Milvus 2.3 listens on every interface, so it runs in a "
        f"network namespace of its own (unshare --net --map-root-user), which failed here: {reason}"
    )


def _loopback_listener(port: int) -> socket.socket:
    """The client port, bound to 127.0.0.1 in the caller's network (SO_REUSEADDR: restarts keep it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ServerArgumentError(f"--port {port} is busy on 127.0.0.1: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


def _loopback_up() -> None:
    """Bring up `lo` of a new network namespace (it starts down): SIOCGIFFLAGS, then SIOCSIFFLAGS | IFF_UP."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        answer = fcntl.ioctl(sock, siocgifflags, struct.pack("16sH22x", b"lo", 0))
        flags = struct.unpack("16sH22x", answer)[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


async def _relay(listener: socket.socket, port: int, server_alive) -> None:
    """Forward each connection of `listener` (127.0.0.1 of the caller's network) to the server's port here."""

    async def forward(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            client_writer.close()
            return
        try:
            await asyncio.gather(_pipe(client_reader, server_writer), _pipe(server_reader, client_writer))
        finally:
            for writer in (client_writer, server_writer):
                writer.close()

    relay = await asyncio.start_server(forward, sock=listener)
    async with relay:
        while server_alive():
            await asyncio.sleep(0.5)


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


def _run_child(data_dir: str, port: int, listen_fd: int) -> None:
    """In the server's own network namespace: start Milvus, then relay the caller's loopback port to it."""
    from milvus import MilvusServer

    listener = socket.socket(fileno=listen_fd)
    _loopback_up()
    server = MilvusServer()
    server.config.try_bind_port = _bind_probe_reusing_address
    server.set_base_dir(data_dir)
    server.listen_port = port
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: (server.stop(), sys.exit(0)))
    asyncio.run(_relay(listener, port, lambda: server.server_proc is not None and server.server_proc.poll() is None))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2, metavar=("DATA_DIR", "PORT"), required=True)
    parser.add_argument("--listen-fd", type=int, required=True)
    args = parser.parse_args()
    _run_child(args.child[0], int(args.child[1]), args.listen_fd)
