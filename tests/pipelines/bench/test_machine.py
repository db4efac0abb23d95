"""The bench's measure of other processes' CPU: its own children are not "other"."""

import subprocess
import sys

import pytest

from pipelines.bench.machine import OtherCpu

BURN_ONE_SECOND = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_cpu_of_children_the_bench_ran_is_not_counted_as_other_processes():
    with OtherCpu() as other:
        children = [subprocess.Popen([sys.executable, "-c", BURN_ONE_SECOND]) for _ in range(2)]
        assert [child.wait() for child in children] == [0, 0]
    # Two children each burning a CPU-second are the bench's own CPU, which `share` leaves out; the
    # share itself is whatever the machine's other processes did meanwhile (other tests, too).
    assert other.own_s is not None and other.own_s >= 1.9
    assert other.share is not None
