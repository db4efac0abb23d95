"""Custom Haystack components of lookup-knowledge (one component per module) and their shared contracts."""

import os

# Haystack sends anonymous usage telemetry by default; this tool runs on closed machines.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
