#!/usr/bin/env bash
# Set up (idempotent), index the bundled knowledge/ into Milvus Lite and answer an example query.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export HF_HUB_OFFLINE=1 HAYSTACK_TELEMETRY_ENABLED=False
.venv/bin/knowledge index "$@"
.venv/bin/knowledge lookup "${DEMO_QUERY:-the postgres replica is falling behind the primary, what should I check?}" "$@"
