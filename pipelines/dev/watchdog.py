"""
The watchdog of a dev Milvus server's process group: the first member of the group, holding the
read end of a pipe whose write end only the starting process has. When that process ends, by any
signal SIGKILL included, the pipe reads end-of-file and the watchdog ends the group as `stop()`
would (SIGTERM, then SIGKILL after a grace period): a killed `knowledge dev milvus-server` leaves
no Milvus holding the data folder or a port (docs/milvus.md).

Usage example (what `MilvusServerProcess` does):

```python
lifeline = Lifeline()
watchdog = lifeline.start_watchdog(log)  # a new process group
server = subprocess.Popen(command, process_group=watchdog.pid)
```
"""

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time

STOP_GRACE_S = 5.0
POLL_S = 0.2


class Lifeline:
    """The pipe between a starting process and its watchdog; closing the write end (or dying) ends the group."""

    def __init__(self) -> None:
        self._read_end, self._write_end = os.pipe()  # neither inherited by other children (O_CLOEXEC)

    def start_watchdog(self, log, grace_s: float = STOP_GRACE_S) -> subprocess.Popen:
        """
        The watchdog as the leader of a new process group (its output to `log`, an open file); the
        server joins the group (`process_group=watchdog.pid`).
        """
        command = [sys.executable, "-m", "pipelines.dev.watchdog", "--lifeline-fd", str(self._read_end)]
        try:
            return subprocess.Popen(
                [*command, "--grace-s", str(grace_s)],
                pass_fds=(self._read_end,),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,  # a new group in this session: the server may join only a group of its session
            )
        finally:
            os.close(self._read_end)  # the watchdog's now: end-of-file then means this process is gone

    def cut(self) -> None:
        """Let the watchdog end the group (after `stop()` it finds nothing left but itself)."""
        write_end, self._write_end = self._write_end, None
        if write_end is not None:
            os.close(write_end)


def _exited(pid: int) -> bool:
    """Whether a process has exited (a zombie nobody reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def watch(lifeline_fd: int, grace_s: float) -> None:
    """Block until the starting process is gone, then end this process group: SIGTERM, SIGKILL after `grace_s`."""
    # SIGTERM is sent to the whole group, this process included: it must outlive it to send SIGKILL.
    signal.signal(signal.SIGTERM, lambda *_: None)
    with contextlib.suppress(OSError):
        while os.read(lifeline_fd, 1):
            pass
    group = os.getpgrp()
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    others = _other_members(group)
    while others and time.monotonic() < deadline:
        time.sleep(POLL_S)
        others = [pid for pid in others if not _exited(pid)]
    os.killpg(group, signal.SIGKILL)  # whatever ignored SIGTERM, and this process last


def _other_members(group: int) -> list[int]:
    """The pids of this process group but this process (read from /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with (
                contextlib.suppress(OSError, IndexError, ValueError),
                open(f"/proc/{entry}/stat", encoding="ascii") as stat,
            ):
                if int(stat.read().rsplit(")", 1)[1].split()[2]) == group:
                    members.append(int(entry))
    return members


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lifeline-fd", type=int, required=True)
    parser.add_argument("--grace-s", type=float, default=STOP_GRACE_S)
    args = parser.parse_args()
    watch(args.lifeline_fd, args.grace_s)
