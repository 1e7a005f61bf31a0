#!/bin/sh
# tests/unprivileged_access.sh [CHECKOUT]: let uid 65534 reach the checkout (default: this one).
# Some tests run the installed tools as that unprivileged user, to test permission errors for real.
# The checkout gets go+rx; a parent directory that user cannot search (mktemp -d makes them 0700)
# gets o+x: search only, its entries still cannot be listed. Exits 1 if the user still cannot read
# the checkout's pyproject.toml.
set -eu
here=$(cd "${1:-$(dirname "$0")/..}" && pwd -P)
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
chmod go+rx "$here"
path=
old_ifs=$IFS
IFS=/
for part in ${here#/}; do
    path="$path/$part"
    if ! as_nobody test -x "$path"; then
        chmod o+x "$path"
        echo "tests/unprivileged_access.sh: let other users search $path (chmod o+x) for the tests run as uid 65534" >&2
    fi
done
IFS=$old_ifs
if ! as_nobody test -r "$here/pyproject.toml"; then
    echo "tests/unprivileged_access.sh: uid 65534 cannot read $here/pyproject.toml; some tests run as" \
         "that user: make the checkout readable by other users" >&2
    exit 1
fi
