#!/usr/bin/env bash
# Lint: ruff (rules and formatting, configured in pyproject.toml) and a dead-code check.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/vulture components pipelines tests scripts/vulture_allowlist.py --min-confidence 80
# Module size (450 lines at most) and import cycles, which ruff does not check.
.venv/bin/python scripts/check_structure.py
