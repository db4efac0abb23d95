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
    # Two children each burning a CPU-second: counted as "other", they alone would be most of the
    # machine's CPUs (about 100% on 2 cores); what remains is only the machine's background load.
    assert other.share is not None and other.share < 0.5
