"""
`knowledge bench`: each benchmark measures the real pipeline against a floor measured in the same
process, on the same data, in the same run, and prints both with their ratio (docs/benchmarks.md).
"""

from components.common.stats import percentile
from pipelines.bench.corpus import cluster_line, vary_markdown
from pipelines.bench.index_bench import bench_index
from pipelines.bench.lookup_bench import bench_lookup, time_lookups

__all__ = ["bench_index", "bench_lookup", "cluster_line", "percentile", "time_lookups", "vary_markdown"]
