#!/usr/bin/env bash
# Set up (idempotent) and run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export HF_HUB_OFFLINE=1 HAYSTACK_TELEMETRY_ENABLED=False
exec .venv/bin/python -m pytest "$@"
