"""The bench's measure of other processes' CPU: its own children are not "other"."""

import subprocess
import sys

import pytest

from pipelines.bench.machine import OtherCpu

BURN_ONE_SECOND = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_cpu_of_a_child_the_bench_ran_is_not_counted_as_other_processes():
    with OtherCpu() as other:
        subprocess.run([sys.executable, "-c", BURN_ONE_SECOND], check=True)
    # The child's second of CPU is most of the block's busy time; counted as "other" it would be ~50%.
    assert other.share is not None and other.share < 0.25
