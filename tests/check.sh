#!/bin/sh
# Lint, type-check and run the whole test suite; then run pytest again as on a host that already
# has specs in /etc/cdi and /var/run/cdi (tests/host_specs.sh), to prove that no test depends on
# them. Exits non-zero if any step fails. `--pytest-only` skips the checks before pytest
# (tests/stress.sh); other arguments go to pytest.
set -eu
cd "$(dirname "$0")/.."
PY=.venv/bin/python
if [ "${1-}" = "--pytest-only" ]; then
    shift
else
    echo "== ruff"; $PY -m ruff check . && $PY -m ruff format --check .
    echo "== mypy --strict"; $PY -m mypy
    echo "== import contracts"; .venv/bin/lint-imports
fi
echo "== pytest"; $PY -m pytest "$@"
echo "== pytest, with specs in /etc/cdi and /var/run/cdi (the image tests once are enough)"
status=0
tests/host_specs.sh $PY -m pytest -m "not image" "$@" || status=$?
# 5: no test left to run (all those selected were image tests)
if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then exit "$status"; fi
