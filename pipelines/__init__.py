"""Pipeline builders, serialized pipelines, the `knowledge` CLI, evaluation and benchmarks."""

import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
