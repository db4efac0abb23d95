"""The YAML pipelines (yaml/) and their loader, the `knowledge` CLI, evaluation and benchmarks."""

import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
