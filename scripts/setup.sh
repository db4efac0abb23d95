#!/usr/bin/env bash
# Create .venv and install the project with its test extras. Idempotent: a second run with an
# unchanged pyproject.toml only checks a stamp file and returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin=${PYTHON:-}
if [ -z "$python_bin" ]; then
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then python_bin=$candidate; break; fi
  done
fi
"$python_bin" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "setup: Python >= 3.11 is required (found $("$python_bin" --version 2>&1))" >&2; exit 2; }

[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
stamp=".venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing lookup-knowledge into .venv (a few minutes the first time)" >&2
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[dev]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
