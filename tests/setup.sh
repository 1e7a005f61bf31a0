#!/bin/sh
# Install everything the tests need on Debian 12, as root: Debian packages and a virtualenv in .venv.
set -eu
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    python3-venv podman runc busybox-static util-linux systemd \
    umockdev gir1.2-umockdev-1.0 libumockdev0 python3-gi mmdebstrap e2fsprogs >/dev/null
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# the runtime dependencies as the image has them (deploy/requirements.lock), then the rest
.venv/bin/pip install -q --require-hashes --no-deps -r deploy/requirements.lock
.venv/bin/pip install -q -e '.[test]'
tests/unprivileged_access.sh
