#!/bin/sh
# tests/stress.sh [PYTEST-ARGS...]: run the pytest part of tests/check.sh on a busy machine: two
# CPU-bound processes run meanwhile, and another keeps creating and removing loop devices (and so
# makes the kernel announce block devices coming and going: tests/loopchurn.py). Exits with
# pytest's status. Needs root, like the suite. Everything it starts is stopped on exit (also on
# Ctrl-C or a failure), and its loop devices and files are removed; it touches no other loop device.
set -eu
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ] || [ ! -e /dev/loop-control ] || ! command -v losetup >/dev/null; then
    echo "tests/stress.sh: needs root, /dev/loop-control and losetup (to create loop devices)" >&2
    exit 2
fi
work=$(mktemp -d /tmp/cdi-stress.XXXXXX)
pids=""
cleanup() {
    status=$?
    trap - EXIT INT TERM
    for pid in $pids; do kill "$pid" 2>/dev/null || true; done
    for pid in $pids; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for _ in 1 2; do
    sh -c 'while :; do :; done' &
    pids="$pids $!"
done
.venv/bin/python -m tests.loopchurn "$work" &
pids="$pids $!"

started=$(date +%s)
status=0
tests/check.sh --pytest-only "$@" || status=$?
echo "tests/stress.sh: pytest exited with $status after $(($(date +%s) - started)) s under load" >&2
exit "$status"
