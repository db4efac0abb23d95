#!/usr/bin/env bash
# Set up (idempotent), lint, and run the test suite: what CI runs. Extra arguments go to pytest;
# LINT=0 skips the lint step (e.g. `LINT=0 scripts/test.sh -k fallback`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${LINT:-1}" != 0 ]; then
  scripts/lint.sh
fi
export HF_HUB_OFFLINE=1 HAYSTACK_TELEMETRY_ENABLED=False
exec .venv/bin/python -m pytest "$@"
