"""Writing small spec files for the store and CLI tests."""

from __future__ import annotations

import json
from pathlib import Path


def write_spec(directory: Path, file_name: str, kind: str, *names: str, env: str = "") -> Path:
    """A valid 0.3.0 spec of ``kind`` with one device node per device name."""
    devices = []
    for name in names:
        edits: dict[str, object] = {"deviceNodes": [{"path": f"/dev/{name}"}]}
        if env:
            edits["env"] = [env]
        devices.append({"name": name, "containerEdits": edits})
    spec = {"cdiVersion": "0.3.0", "kind": kind, "devices": devices}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name
    path.write_text(json.dumps(spec, indent=2) + "\n")
    return path


def shared_node_dir(directory: Path) -> Path:
    """One host node given by two vendors' kinds (a vendor renamed, its old specs left); nodes shared
    by two kinds of one vendor, or two devices of one kind, which is that vendor's own choice."""
    write_spec(directory, "example.com-gpu.json", "example.com/gpu", "foo", "baz")
    write_spec(directory, "example.com-igpu.json", "example.com/igpu", "baz")
    spec = {"cdiVersion": "0.5.0", "kind": "mycorp.com/gpu", "devices": [
        {"name": "bar", "containerEdits": {"deviceNodes": [{"path": "/dev/bar", "hostPath": "/dev/foo"}]}},
        {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/qux"}]}},
        {"name": "qux", "containerEdits": {"deviceNodes": [{"path": "/dev/qux"}]}},
    ]}  # fmt: skip
    (directory / "mycorp.com-gpu.json").write_text(json.dumps(spec))
    return directory
