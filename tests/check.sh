#!/bin/sh
# Lint, type-check and run the whole test suite; exits non-zero on the first failure.
set -eu
cd "$(dirname "$0")/.."
PY=.venv/bin/python
echo "== ruff"; $PY -m ruff check . && $PY -m ruff format --check .
echo "== mypy --strict"; $PY -m mypy
echo "== import contracts"; .venv/bin/lint-imports
echo "== pytest"; $PY -m pytest "$@"
