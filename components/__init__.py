"""Custom Haystack components of lookup-knowledge (one component per module) and their shared contracts."""

import os

# Marks this `components` as lookup-knowledge's: the name is generic, and another distribution's
# package of that name found first on the path would shadow it (`pipelines` checks the mark;
# docs/architecture.md, "Package names").
DISTRIBUTION = "lookup-knowledge"

# Haystack sends anonymous usage telemetry by default; this tool runs on closed machines.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
