#!/bin/sh
# tests/host_specs.sh COMMAND...: run COMMAND (as root) in a private mount namespace whose /etc/cdi
# and /var/run/cdi hold specs as on a real host: cdi-gen's own kinds, as a scan of this host leaves
# them (with the ownership record), and another vendor's. The host sees none of it: every mount is
# private to the namespace, and a directory the host lacks is made in an overlay over its parent.
set -eu
cd "$(dirname "$0")/.."
if [ -z "${HOST_SPECS_LAYERS:-}" ]; then
    HOST_SPECS_LAYERS=$(mktemp -d /tmp/cdi-host-specs.XXXXXX)
    export HOST_SPECS_LAYERS
    status=0
    unshare -m --propagation private "$0" "$@" || status=$?
    rm -rf "$HOST_SPECS_LAYERS"
    exit "$status"
fi

private_dir() {  # an empty tmpfs at $1
    if [ ! -d "$1" ]; then
        parent=$(realpath "$(dirname "$1")")
        layer="$HOST_SPECS_LAYERS/$(echo "$parent" | tr / _)"
        mkdir -p "$layer/upper" "$layer/work"
        mount -t overlay overlay -o "lowerdir=$parent,upperdir=$layer/upper,workdir=$layer/work" "$parent"
        mkdir "$1"
    fi
    mount -t tmpfs -o mode=755 tmpfs "$1"
}
private_dir /etc/cdi
private_dir /var/run/cdi

CDI_SPEC_DIRS= .venv/bin/cdi-gen scan --source udev --output-dir /etc/cdi >/dev/null
cat >/etc/cdi/vendor.example-gpu.json <<'SPEC'
{"cdiVersion": "0.6.0", "kind": "vendor.example/gpu",
 "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/vendor-gpu0"}]}}],
 "containerEdits": {"env": ["VENDOR_GPU=1"]}}
SPEC
cat >/var/run/cdi/vendor.example-nic.yaml <<'SPEC'
cdiVersion: "0.5.0"
kind: vendor.example/nic
devices:
  - name: all
    containerEdits:
      deviceNodes: [{path: /dev/vendor-nic0}, {path: /dev/vendor-nic1}]
SPEC
echo "tests/host_specs.sh: $(ls /etc/cdi /var/run/cdi | tr '\n' ' ')" >&2
exec "$@"
