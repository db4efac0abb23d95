"""Measuring the machine: CPU and wall timers, percentiles, peak RSS, load and other processes' CPU."""

import os
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from components.common.stats import percentile


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def settle(limit_s: float = 120.0, window_s: float = 1.0, busy_share: float = 0.05) -> float:
    """
    Wait until this process is idle: Milvus Lite runs inside it and may still seal, compact or
    index segments after a large insert, which would weigh on whatever is timed next (the runs
    measured so far were idle after the first one-second window). Returns the seconds waited
    (at most about `limit_s`).
    """
    started = time.perf_counter()
    while time.perf_counter() - started < limit_s:
        cpu = time.process_time()
        time.sleep(window_s)
        if time.process_time() - cpu < busy_share * window_s:
            break
    return time.perf_counter() - started


class OtherCpu:
    """
    How much CPU other processes took while a block ran: the machine's busy time (/proc/stat)
    minus the CPU time of this process and of its children that ended (a bench's own servers
    and one-shot commands are not "other"), as a share of all CPUs over the wall time. On a shared
    machine this tells whether figures were taken on a quiet or a contended machine (torch's
    threads slow down sharply when a core is taken). None where /proc/stat does not exist.

        with OtherCpu() as other:
            ...
        other.share  # e.g. 0.07: other processes used 7% of the CPUs meanwhile
        other.own_s  # CPU seconds of this process and its waited-for children meanwhile
    """

    def __enter__(self) -> "OtherCpu":
        self.share: float | None = None
        self.own_s: float | None = None
        self._start = (_machine_busy_s(), _own_cpu_s(), time.perf_counter())
        return self

    def __exit__(self, *_exc_info) -> None:
        busy, own, wall = _machine_busy_s(), _own_cpu_s(), time.perf_counter()
        self.own_s = round(own - self._start[1], 3)
        if busy is None or self._start[0] is None or wall <= self._start[2]:
            return
        others = (busy - self._start[0]) - (own - self._start[1])
        self.share = round(max(0.0, others) / ((wall - self._start[2]) * (os.cpu_count() or 1)), 3)


def _own_cpu_s() -> float:
    """CPU seconds of this process and of its children that ended and were waited for."""
    times = os.times()
    return time.process_time() + times.children_user + times.children_system


def _machine_busy_s() -> float | None:
    """CPU seconds all CPUs spent busy since boot (user, nice, system, irq, softirq, steal)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def format_other_cpu(share: float | None) -> str:
    if share is None:
        return "other processes: not measured (no /proc/stat)"
    note = "quiet" if share < 0.1 else "busy: figures are less reliable" if share >= 0.25 else "some load"
    return f"other processes used {share:.0%} of the {os.cpu_count()} CPUs during the timed part ({note})"


def timed(function: Callable[[], Any]) -> tuple[Any, float]:
    """`function()` and its wall-clock seconds."""
    started = time.perf_counter()
    value = function()
    return value, time.perf_counter() - started


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(latencies_ms),
        "p50_ms": round(percentile(latencies_ms, 0.5), 2),
        "p95_ms": round(percentile(latencies_ms, 0.95), 2),
        "mean_ms": round(statistics.fmean(latencies_ms), 2),
    }


@dataclass
class Timing:
    """Wall-clock and process CPU seconds (all threads, Milvus Lite's server threads included)."""

    wall_s: float
    cpu_s: float


def timed_cpu(function: Callable[[], Any]) -> tuple[Any, Timing]:
    wall, cpu = time.perf_counter(), time.process_time()
    value = function()
    return value, Timing(time.perf_counter() - wall, time.process_time() - cpu)


def call_ms(function: Callable[[], Any]) -> tuple[float, float]:
    """Wall-clock and process CPU milliseconds of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    function()
    return (time.perf_counter() - wall) * 1000.0, (time.process_time() - cpu) * 1000.0
