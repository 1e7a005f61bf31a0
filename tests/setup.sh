#!/bin/sh
# Install everything the tests need on Debian 12, as root: Debian packages and a virtualenv in .venv.
set -eu
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    python3-venv podman runc busybox-static util-linux systemd \
    umockdev gir1.2-umockdev-1.0 libumockdev0 python3-gi mmdebstrap >/dev/null
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test]'
# Some tests run the installed tools as an unprivileged user (uid 65534, to test permission
# errors for real), so that user must be able to enter the checkout (mktemp -d makes it 0700).
chmod go+rx .
if ! setpriv --reuid=65534 --regid=65534 --clear-groups test -r pyproject.toml; then
    echo "tests/setup.sh: uid 65534 cannot read $(pwd)/pyproject.toml: a parent directory is not" \
         "searchable by other users; clone into a directory they can enter" >&2
    exit 1
fi
