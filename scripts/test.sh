#!/usr/bin/env bash
# Set up (idempotent), lint, and run the test suite: what CI runs. Extra arguments go to pytest;
# LINT=0 skips the lint step (e.g. `LINT=0 scripts/test.sh -k fallback`). The suite runs in
# TEST_WORKERS processes (default 2, pytest-xdist; a module's tests stay in one process, so its
# fixtures are built once); TEST_WORKERS=0 runs it in this one (for -x, --pdb, -s).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${LINT:-1}" != 0 ]; then
  scripts/lint.sh
fi
export HF_HUB_OFFLINE=1 HAYSTACK_TELEMETRY_ENABLED=False
workers=${TEST_WORKERS:-2}
if [ "$workers" = 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
exec .venv/bin/python -m pytest -n "$workers" --dist loadscope "$@"
