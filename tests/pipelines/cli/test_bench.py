"""`knowledge bench`: the parts its help names are the parts the benchmarks run."""

from pipelines.bench.all import PARTS as ALL_PARTS
from pipelines.bench.backends import PARTS as BACKENDS_PARTS
from pipelines.cli import bench


def test_the_parts_named_in_the_help_are_the_benchmarks_parts():
    assert bench.ALL_PARTS == ALL_PARTS
    assert bench.BACKENDS_PARTS == BACKENDS_PARTS
